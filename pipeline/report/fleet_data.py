"""What the fleet report shows, read from run_summary and the fleet tables (run_attention, run_baselines,
fleet_weekly, fleet_config_groups): the report computes no figure and decides no verdict of its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from pipeline import lake
from pipeline.report.evidence import shown_line
from pipeline.report.warehouse import clean, rows, table_rows

SUMMARY_COLUMNS = ("run_id", "failure_class", "failure_detail", "last_step", "expected_steps", "goodput",
                   "median_step_s", "bottleneck_phase", "experiment_name", "root_cause_text", "last_ts", "mtime",
                   "ingested_at", "analysis_error", "gpu_hours_lost", "training_outcome", "training_outcome_step")
# the fleet tables the fleet report reads, each one file: viewed by name
FLEET_READS = ("run_attention", "run_baselines", "fleet_weekly", "fleet_config_groups")
# the per-run tables it reads, a file per run: read straight from their files, as binding a view over them
# reads every file's footer, and the query then reads them again
RUN_READS = ("run_summary", "run_advice")
# run_attention's `attention` of a run it has no row for: none of its verdicts (failed, hung, anomalous, slower)
FINE = 3


@dataclass
class FleetRun:
    """One run as the fleet report lists it."""

    run_id: str
    failure_class: str
    last_step: int | None
    expected_steps: int | None
    goodput: float | None
    median_step_s: float | None
    bottleneck_phase: str | None
    experiment: str
    config_group: str
    ended_at: datetime | None
    ended_by_file_time: bool
    episodes: int
    anomalous_steps: int
    top_anomaly: str | None
    root_cause_text: str
    regression: str = ""
    analysis_error: str = ""  # a step of the analysis failed on this run alone (pipeline/isolation.py)
    training_outcome: str | None = None
    training_outcome_step: int | None = None
    failure_detail: str | None = None  # what the evidence says beyond the class (run_summary)
    analysed_at: datetime | None = None  # when the warehouse took the run in (run_summary.ingested_at)
    gpu_hours_lost: float | None = None
    accelerator: str = "GPU"  # run_facts: the device whose hours gpu_hours_lost counts (a TPU's are TPU-hours)

    attention: int = FINE  # run_attention's: 0 failed (its ending or its training), 1 hung, 2 anomalous or slower


@dataclass
class FleetReportData:
    """The fleet report's content: the runs that ended by `day`, and the fleet tables' rows up to it."""

    day: date
    runs: list[FleetRun]
    weeks: list[dict[str, Any]] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    # run_advice's changes (config and env rows) on how each run ended, by run
    advice: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def load_fleet(warehouse: str | Path, day: date) -> FleetReportData:
    """Every run that ended by the end of `day` (or has no time), and the weeks that ended by then."""
    sources = lake.fleet_sources(warehouse, RUN_READS)
    if "run_summary" not in sources:
        return FleetReportData(day=day, runs=[])
    with lake.reader(warehouse, only=FLEET_READS) as con:
        cutoff = datetime.combine(day + timedelta(days=1), datetime.min.time())
        runs = [r for r in _runs(con, sources) if r.ended_at is None or r.ended_at < cutoff]
        weeks = table_rows(con, "fleet_weekly", "week_end <= $day", {"day": day}, "week_start")
        groups = table_rows(con, "fleet_config_groups", order="runs desc, config_group")
        advice = _changes(con, sources.get("run_advice"), [r.run_id for r in runs])
    return FleetReportData(day=day, runs=runs, weeks=weeks, groups=groups, advice=advice)


def _changes(con: duckdb.DuckDBPyConnection, source: str | None, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per run of `run_ids`: its run_advice changes (config and env rows, no checks) on how it ended, in rank order."""
    if source is None:
        return {}
    try:
        found = rows(con, f"select run_id, rank, kind, setting, current_value, suggested_value from {source} "
                          "where episode_id is null and kind <> 'check' and list_contains($ids, run_id) "
                          "order by run_id, rank", {"ids": run_ids})
    except duckdb.BinderException:
        return {}  # run_advice written before it held episodes and kinds: the next analysis rewrites it
    out: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        out.setdefault(r["run_id"], []).append(r)
    return out


def _runs(con: duckdb.DuckDBPyConnection, sources: dict[str, str]) -> list[FleetRun]:
    # the columns of SUMMARY_COLUMNS the files have (an older warehouse may lack some), in one bind
    found = rows(con, f"select columns(lambda c: list_contains($names, c)) from {sources['run_summary']}",
                 {"names": list(SUMMARY_COLUMNS)})
    verdicts = {r["run_id"]: r for r in table_rows(con, "run_attention")}
    baselines = {r["run_id"]: r for r in table_rows(con, "run_baselines")}
    return [_fleet_run(r, verdicts.get(r["run_id"], {}), baselines.get(r["run_id"], {})) for r in found]


def _fleet_run(r: dict[str, Any], a: dict[str, Any], base: dict[str, Any]) -> FleetRun:
    return FleetRun(
        run_id=r["run_id"],
        failure_class=r.get("failure_class") or "unknown",
        last_step=r.get("last_step"),
        expected_steps=r.get("expected_steps"),
        goodput=clean(r.get("goodput")),
        median_step_s=clean(r.get("median_step_s")),
        bottleneck_phase=r.get("bottleneck_phase"),
        experiment=str(r.get("experiment_name") or ""),
        config_group=str(base.get("config_group") or ""),
        ended_at=_naive(base.get("ended_at") or r.get("last_ts") or r.get("mtime") or r.get("ingested_at")),
        ended_by_file_time=bool(base.get("ended_by_file_time", r.get("last_ts") is None)),
        episodes=int(a.get("episodes") or 0),
        anomalous_steps=int(a.get("anomalous_steps") or 0),
        top_anomaly=a.get("top_anomaly"),
        root_cause_text=shown_line(r.get("root_cause_text")),
        regression=regression(a.get("regression"), base),
        attention=a.get("attention", FINE),
        analysis_error=str(r.get("analysis_error") or ""),
        training_outcome=r.get("training_outcome"),
        training_outcome_step=r.get("training_outcome_step"),
        failure_detail=r.get("failure_detail"),
        analysed_at=_naive(r.get("ingested_at")),
        gpu_hours_lost=clean(r.get("gpu_hours_lost")),
        accelerator=str(base.get("accelerator") or "GPU"),
    )


def _naive(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=None) if value.tzinfo is not None else value


def regression(scope: str | None, base: dict[str, Any]) -> str:
    """run_attention's regression verdict in words, from the run_baselines figures of its `scope`: slower per
    step than earlier runs of its config group or experiment, or fewer tokens per second per GPU than earlier
    runs of its model setup; "" when it is none."""
    if scope in ("group", "exp"):
        ratio, prior, before = base[f"{scope}_step_ratio"], base[f"{scope}_prior_runs"], base[f"{scope}_median_step_s"]
        median = f" vs {before:.1f} s" if before is not None else ""
        label = {"group": "config group", "exp": "experiment"}[scope]
        return f"step time ×{ratio:.2f}{median} over {prior} earlier runs of its {label}"
    if scope == "setup":
        return (f"{base['throughput']:.0f} tokens/s per GPU, ×{1 / base['setup_slowdown_ratio']:.2f} of the "
                f"{base['setup_throughput']:.0f} of {base['setup_prior_runs']} earlier runs of its model setup "
                f"({base.get('model_setup')})")
    return ""
