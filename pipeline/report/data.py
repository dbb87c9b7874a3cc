"""Queries behind the run and fleet reports: every runtime value is a bound DuckDB parameter."""

from __future__ import annotations

import functools
import json
import math
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake, vocabulary

# Timers inside `timing_s/step`, in pipeline order; testing and save_checkpoint run after it closes.
STEP_PHASES = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "update_weights",
)
AFTER_STEP_PHASES = ("testing", "save_checkpoint")
CONFIG_FACTS = (
    "project_name",
    "experiment_name",
    "model_path",
    "rollout_engine",
    "adv_estimator",
    "strategy",
    "nnodes",
    "n_gpus_per_node",
    "rollout_n",
    "rollout_tp",
    "train_batch_size",
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "max_prompt_length",
    "max_response_length",
    "gpu_memory_utilization",
    "actor_lr",
    "total_training_steps",
    "test_freq",
    "save_freq",
)
COMPLETENESS_FACTS = (
    "source_path",
    "archive_form",
    "verl_format",
    "n_files",
    "n_lines",
    "n_bytes",
    "n_undecodable_lines",
    "n_step_lines",
    "n_steps",
    "n_metric_values",
    "n_parse_failures",
    "n_segments",
)
# what counts as a failure in the fleet's figures: not a run stopped on purpose, nor a log cut short
FAILED_CLASSES = vocabulary.FAILED_CLASSES
FLEET_SUMMARY_COLUMNS = {
    "run_id", "failure_class", "last_step", "expected_steps", "goodput", "median_step_s", "bottleneck_phase",
    "experiment_name", "root_cause_text", "model_path", "rollout_engine", "n_gpus_per_node", "nnodes", "rollout_n",
    "config_group", "last_ts", "mtime", "ingested_at",
}
CONTEXT_LINES = 6
FOLDED_STEP_LINE = 160
MAX_ERROR_EVENTS = 12


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """Columns of a warehouse view, or [] if the table is not in the warehouse."""
    found = con.execute(
        "select column_name from duckdb_columns() where table_name = $table order by column_index",
        {"table": table},
    ).fetchall()
    return [name for (name,) in found]


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    """Run a query and return its rows as dicts."""
    cur = con.execute(sql, params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def series(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> dict[str, np.ndarray]:
    """One run's per-step table as float arrays (NULL -> NaN), ordered by step; strings kept as objects."""
    if not columns(con, table):
        return {}
    raw = con.execute(
        f"select * exclude (run_id) from {table} where run_id = $run_id order by step", {"run_id": run_id}
    ).fetchnumpy()
    out = {}
    for name, arr in raw.items():
        if arr.dtype.kind in "iufb":
            out[name] = np.ma.filled(np.ma.asarray(arr).astype(float), np.nan)
        else:
            out[name] = np.asarray(arr, dtype=object)
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


FIXES_FILE = Path(__file__).resolve().parents[1] / "knowledge" / "fixes.json"


@functools.cache
def _fixes() -> dict[str, Any]:
    with open(FIXES_FILE, encoding="utf-8") as f:
        return json.load(f)


def _advice_lookup():
    """`advice_for(kind, cls)` over the fixes knowledge base, or None while it is not there.

    Reads the JSON behind `pipeline.detect.advice_for` directly: importing the detect package
    pulls in scikit-learn, which costs seconds per report process.
    """
    if not FIXES_FILE.is_file():
        return None
    return lambda kind, cls: _fixes().get(kind, {}).get(cls)


@dataclass
class Advice:
    """What the fixes knowledge base says about a class, plus free-text advice a table row carries."""

    summary: str = ""
    causes: list[str] = field(default_factory=list)
    changes: list[dict[str, str]] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.summary or self.causes or self.changes or self.notes)

    @property
    def first_change(self) -> str:
        """The first thing to try, in one line: a configuration change, else the summary or a note."""
        for c in self.changes:
            if c.get("key") not in (None, "", "-"):
                return f"{c['key']} → {c.get('to', '')}"
        return self.summary or (self.notes[0] if self.notes else "")


def advice_entry(kind: str, cls: str | None, given: Any = None, config: dict | None = None) -> Advice:
    """Advice for a 'failure' or 'anomaly' class from the fixes knowledge base; `given` is a row's own advice.

    With the run's `config`, the entry's `changes_if` changes for the flags the run has on come first
    (KL control acts through the reward or through the actor's loss, as the run chose).
    Degrades to the row's advice, or to nothing, when the knowledge base is not installed.
    """
    notes = _as_lines(given)
    lookup = _advice_lookup() if cls else None
    entry: Any = None
    if lookup is not None:
        try:
            entry = lookup(f"{kind}_class", cls)
        except (LookupError, ValueError, OSError):
            entry = None
    if isinstance(entry, dict):
        chosen = [c for flag, extra in (entry.get("changes_if") or {}).items() if _flag_on(config, flag)
                  for c in extra]
        changes = [
            {k: str(v) for k, v in c.items()} if isinstance(c, dict) else {"key": str(c), "to": "", "why": ""}
            for c in [*chosen, *(entry.get("changes") or [])]
        ]
        return Advice(
            summary=str(entry.get("summary") or ""),
            causes=[str(c) for c in entry.get("causes") or []],
            changes=changes,
            source=[str(x) for x in entry.get("source") or []],
            notes=[n for n in notes if not n.startswith("Try: ")] if changes else notes,
        )
    return Advice(notes=notes + _as_lines(entry))


def _config(summary: dict[str, Any]) -> dict | None:
    """The run's config dump (run_summary carries it as JSON), or None."""
    try:
        return json.loads(summary.get("config_json") or "null")
    except (TypeError, ValueError):
        return None


def _flag_on(config: dict | None, dotted: str) -> bool:
    """Whether the dotted config key is true in `config`."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return False
        node = node.get(part)
    return node is True


def _as_lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [line for item in value for line in _as_lines(item)]
    return [str(value)]


@dataclass
class Episode:
    """A run of consecutive anomalous steps with one explanation."""

    episode_id: Any
    anomaly_class: str
    first_step: int
    last_step: int
    n_steps: int
    explanation: str
    advice: Advice


@dataclass
class RunReportData:
    """Everything the run report shows, read from the warehouse."""

    run_id: str
    summary: dict[str, Any]
    facts: dict[str, Any]
    completeness: dict[str, Any]
    problems: list[str]
    lines_by_kind: list[dict[str, Any]]
    lines_by_file: list[dict[str, Any]]
    root_cause: dict[str, Any] | None
    context: list[dict[str, Any]]
    error_events: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    phases: dict[str, np.ndarray]
    health: dict[str, np.ndarray]
    anomaly_steps: np.ndarray
    episodes: list[Episode]
    baseline: list[dict[str, Any]]
    earlier_runs: list[dict[str, Any]]
    failure_advice: Advice = field(default_factory=Advice)
    run_advice: list[dict[str, Any]] = field(default_factory=list)


def _one(con, table: str, run_id: str) -> dict[str, Any]:
    if not columns(con, table):
        return {}
    found = rows(con, f"select * from {table} where run_id = $run_id limit 1", {"run_id": run_id})
    return {k: _clean(v) for k, v in found[0].items()} if found else {}


def _episodes(con, run_id: str, config: dict | None = None) -> tuple[np.ndarray, list[Episode]]:
    cols = set(columns(con, "step_anomalies"))
    if not cols:
        return np.array([], dtype=float), []
    flagged = rows(
        con,
        "select * from step_anomalies where run_id = $run_id and is_anomaly order by step",
        {"run_id": run_id},
    )
    steps = np.array([r["step"] for r in flagged], dtype=float)
    groups: list[list[dict]] = []
    for r in flagged:
        key = r.get("episode_id")
        prev = groups[-1][-1] if groups else None
        same = prev is not None and (
            (key is not None and prev.get("episode_id") == key)
            or (key is None and prev.get("episode_id") is None and r["step"] - prev["step"] <= 1)
        )
        if same:
            groups[-1].append(r)
        else:
            groups.append([r])
    episodes = []
    for g in groups:
        classes = [r.get("anomaly_class") or "other" for r in g]
        cls = max(set(classes), key=classes.count)
        head = g[0]
        first = head.get("episode_first_step")
        last = head.get("episode_last_step")
        explanation = next((r["explanation"] for r in g if r.get("explanation")), "")
        episodes.append(
            Episode(
                episode_id=head.get("episode_id"),
                anomaly_class=cls,
                first_step=int(first if first is not None else g[0]["step"]),
                last_step=int(last if last is not None else g[-1]["step"]),
                n_steps=len(g),
                explanation=explanation,
                advice=advice_entry("anomaly", cls, next((r.get("advice") for r in g if r.get("advice")), None),
                                    config),
            )
        )
    return steps, episodes


def _ended_at(row: dict[str, Any]) -> datetime | None:
    for key in ("last_ts", "_r_last_ts", "mtime", "_r_mtime", "ingested_at", "_r_ingested_at"):
        value = row.get(key)
        if isinstance(value, datetime):
            return value
    return None


def load_run(warehouse: str | Path, run_id: str) -> RunReportData:
    """Read one run's tables; tables or columns missing from the warehouse come back empty."""
    run_id = lake.check_run_id(run_id)
    # Earlier runs of the experiment come from the fleet table run_baselines (one file); a warehouse
    # without it reads them from the whole run_summary, which opens every run's partition.
    whole = () if lake.table_source(warehouse, "run_baselines") else ("run_summary", "runs")
    con = lake.connect(warehouse, run_ids=[run_id], whole=whole)
    try:
        summary = _one(con, "run_summary", run_id)
        runs_row = _one(con, "runs", run_id)
        if not summary and not runs_row:
            raise LookupError(f"run {run_id!r} is not in the warehouse {warehouse}")
        merged = {**runs_row, **{k: v for k, v in summary.items() if v is not None}}
        facts = {k: merged[k] for k in CONFIG_FACTS if merged.get(k) is not None}
        completeness = {k: runs_row.get(k, merged.get(k)) for k in COMPLETENESS_FACTS}
        completeness["parse_completeness"] = merged.get("parse_completeness")
        problems = [str(p) for p in (runs_row.get("problems") or [])]

        lines_by_kind, lines_by_file = [], []
        if columns(con, "log_lines"):
            lines_by_kind = rows(
                con,
                "select coalesce(kind, 'other') as kind, count(*) as n from log_lines "
                "where run_id = $run_id group by all order by n desc",
                {"run_id": run_id},
            )
            lines_by_file = rows(
                con,
                "select file, count(*) as n, count(*) filter (kind = 'error') as errors, "
                "count(*) filter (kind = 'other') as other from log_lines "
                "where run_id = $run_id group by all order by n desc limit 50",
                {"run_id": run_id},
            )

        root_cause, context = None, []
        if summary.get("root_cause_text") or summary.get("root_cause_line_no") is not None:
            root_cause = {
                "file": summary.get("root_cause_file"),
                "line_no": summary.get("root_cause_line_no"),
                "text": summary.get("root_cause_text") or "",
                "kind": "cause",
            }
        elif (
            summary.get("failure_class") != "completed"
            and summary.get("last_line_no") is not None
            and summary.get("last_line_file")
        ):
            root_cause = {
                "file": summary.get("last_line_file"),
                "line_no": summary.get("last_line_no"),
                "text": summary.get("last_line_text") or "",
                "kind": "last_line",
            }
        if root_cause and root_cause["file"] and root_cause["line_no"] is not None and lines_by_kind:
            # a step line holds hundreds of metrics: folded to its head, so the causal line stays in view
            context = rows(
                con,
                "select line_no, kind, line_no = $line_no as is_cause, "
                "case when kind = 'step_metrics' and length(text) > $fold "
                "then left(text, $fold) || format(' … ({} metrics)', length(text) - length(replace(text, ' - ', '')) // 3) "
                "else text end as text from log_lines "
                "where run_id = $run_id and file = $file and line_no between $lo and $hi order by line_no",
                {
                    "run_id": run_id,
                    "file": root_cause["file"],
                    "line_no": int(root_cause["line_no"]),
                    "lo": int(root_cause["line_no"]) - CONTEXT_LINES,
                    "hi": int(root_cause["line_no"]) + CONTEXT_LINES,
                    "fold": FOLDED_STEP_LINE,
                },
            )

        error_events = []
        if columns(con, "run_events"):
            # The last events are the ones next to the failure; show them in log order.
            # traceback frames and their source lines are in the excerpt above: one row per event, not per frame
            error_events = rows(
                con,
                "select * from (select * exclude (run_id) from run_events where run_id = $run_id "
                "and event_class not in ('traceback_frame', 'traceback_code', 'chained_exception') "
                "order by coalesce(segment, 0) desc, file desc, line_no desc limit $n) "
                "order by coalesce(segment, 0), file, line_no",
                {"run_id": run_id, "n": MAX_ERROR_EVENTS},
            )
        findings = []
        if columns(con, "config_findings"):
            findings = rows(
                con,
                "select * exclude (run_id) from config_findings where run_id = $run_id "
                "order by case severity when 'error' then 0 when 'warning' then 1 else 2 end, finding",
                {"run_id": run_id},
            )

        anomaly_steps, episodes = _episodes(con, run_id, _config(merged))
        baseline = []
        if columns(con, "run_baselines"):
            baseline = rows(
                con, "select * exclude (run_id) from run_baselines where run_id = $run_id", {"run_id": run_id}
            )
        earlier = _earlier_runs(con, run_id, merged)
        run_advice = []
        if columns(con, "run_advice"):
            run_advice = rows(con, "select * exclude (run_id) from run_advice where run_id = $run_id order by rank",
                              {"run_id": run_id})
        failure_advice = advice_entry("failure", merged.get("failure_class"))
        if run_advice:
            # the run's own rows replace the class's generic list of changes
            failure_advice.changes = []
        return RunReportData(
            run_id=run_id,
            summary=merged,
            facts=facts,
            completeness=completeness,
            problems=problems,
            lines_by_kind=lines_by_kind,
            lines_by_file=lines_by_file,
            root_cause=root_cause,
            context=context,
            error_events=error_events,
            findings=findings,
            phases=series(con, "step_phases", run_id),
            health=series(con, "step_health", run_id),
            anomaly_steps=anomaly_steps,
            episodes=episodes,
            baseline=baseline,
            earlier_runs=earlier,
            failure_advice=failure_advice,
            run_advice=run_advice,
        )
    finally:
        con.close()


def _earlier_runs(con, run_id: str, this: dict[str, Any]) -> list[dict[str, Any]]:
    """Up to ten earlier runs of the same experiment, newest first."""
    exp = this.get("experiment_name")
    if exp and "ended_at" in columns(con, "run_baselines"):
        return rows(
            con,
            "select run_id, failure_class, last_step, expected_steps, median_step_s, goodput, bottleneck_phase, "
            "ended_at from run_baselines where experiment_name = $exp and run_id <> $run_id "
            "and ($ended is null or ended_at is null or ended_at < $ended) "
            "order by ended_at desc nulls last, run_id desc limit 10",
            {"exp": exp, "run_id": run_id, "ended": _ended_at(this)},
        )
    cols = set(columns(con, "run_summary"))
    if not exp or "experiment_name" not in cols:
        return []
    wanted = [
        f"s.{c}"
        for c in ("run_id", "failure_class", "last_step", "expected_steps", "median_step_s", "goodput",
                  "bottleneck_phase")
        if c in cols
    ]
    run_cols = set(columns(con, "runs"))
    stamp = [f"r.{c}" for c in ("last_ts", "mtime") if c in run_cols]
    join = "left join runs r using (run_id)" if stamp else ""
    ended_expr = f"coalesce({', '.join(stamp)})" if stamp else "null::timestamp"
    ended = _ended_at(this)
    return rows(
        con,
        f"select {', '.join(wanted)}, {ended_expr} as ended_at from run_summary s {join} "
        "where s.experiment_name = $exp and s.run_id <> $run_id "
        f"and ($ended is null or {ended_expr} is null or {ended_expr} < $ended) "
        "order by ended_at desc nulls last, s.run_id desc limit 10",
        {"exp": exp, "run_id": run_id, "ended": ended},
    )


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
    episodes: int
    anomalous_steps: int
    top_anomaly: str | None
    root_cause_text: str
    shares: dict[str, float]
    regression: str = ""

    @property
    def attention(self) -> int:
        """0 failed, 1 hung, 2 anomalous, 3 fine: the order of the attention list."""
        if self.failure_class == "hang":
            return 1
        if self.failure_class in FAILED_CLASSES:
            return 0
        if self.episodes or self.regression:
            return 2
        return 3


@dataclass
class FleetReportData:
    """The fleet report's content."""

    day: date
    runs: list[FleetRun]
    baselines: dict[str, list[dict[str, Any]]]
    groups: list[dict[str, Any]] = field(default_factory=list)


def config_group(row: dict[str, Any]) -> str:
    """The config group of a run as `run_baselines` names it: model | engine | GPUs | rollout n."""
    if row.get("config_group"):
        return str(row["config_group"])
    gpus = (row.get("n_gpus_per_node") or 1) * (row.get("nnodes") or 1)
    return " | ".join(
        (str(row.get("model_path") or "?"), str(row.get("rollout_engine") or "?"), f"{gpus} GPUs",
         f"n={row.get('rollout_n') or 1}")
    )


def load_fleet(warehouse: str | Path, day: date) -> FleetReportData:
    """Every run that ended by the end of `day` (or has no time), with one query per table."""
    con = lake.connect(warehouse)
    try:
        cols = columns(con, "run_summary")
        if not cols:
            return FleetReportData(day=day, runs=[], baselines={})
        wanted = [c for c in cols if c in FLEET_SUMMARY_COLUMNS or c.startswith("share_")]
        picks = ", ".join(f"s.{c}" for c in wanted)
        join = ""
        run_cols = set(columns(con, "runs"))
        # run_summary normally carries the run's timestamps and config; join `runs` only for what it lacks.
        missing = [c for c in ("last_ts", "mtime", "ingested_at", *CONFIG_FACTS) if c in run_cols and c not in cols]
        if missing and not any(c in cols for c in ("last_ts", "mtime", "ingested_at")):
            picks += "".join(f", r.{c} as _r_{c}" for c in missing)
            join = "left join runs r using (run_id)"
        summary_rows = rows(con, f"select {picks} from run_summary s {join}")
        anomalies: dict[str, dict[str, Any]] = {}
        a_cols = set(columns(con, "step_anomalies"))
        if a_cols:
            episode_expr = "count(distinct episode_id)" if "episode_id" in a_cols else "count(*)"
            for r in rows(
                con,
                f"select run_id, {episode_expr} as episodes, count(*) as steps, "
                "mode(anomaly_class) as top from step_anomalies where is_anomaly group by run_id",
            ):
                anomalies[r["run_id"]] = r
        baselines: dict[str, list[dict[str, Any]]] = {}
        if columns(con, "run_baselines"):
            for r in rows(con, "select * from run_baselines"):
                baselines.setdefault(r["run_id"], []).append(r)
        groups = []
        if columns(con, "fleet_config_groups"):
            groups = [{k: _clean(v) for k, v in r.items()} for r in rows(con, "select * from fleet_config_groups")]
    finally:
        con.close()

    cutoff = datetime.combine(day + timedelta(days=1), datetime.min.time())
    runs = []
    for r in summary_rows:
        for key in CONFIG_FACTS:
            if r.get(key) is None and r.get(f"_r_{key}") is not None:
                r[key] = r[f"_r_{key}"]
        ended = _ended_at(r)
        if ended is not None and ended.tzinfo is not None:
            ended = ended.replace(tzinfo=None)
        if ended is not None and ended >= cutoff:
            continue
        a = anomalies.get(r["run_id"], {})
        base = (baselines.get(r["run_id"]) or [{}])[0]
        runs.append(
            FleetRun(
                run_id=r["run_id"],
                failure_class=r.get("failure_class") or "unknown",
                last_step=r.get("last_step"),
                expected_steps=r.get("expected_steps"),
                goodput=_clean(r.get("goodput")),
                median_step_s=_clean(r.get("median_step_s")),
                bottleneck_phase=r.get("bottleneck_phase"),
                experiment=str(r.get("experiment_name") or ""),
                config_group=config_group({**r, **base}),
                ended_at=ended,
                episodes=int(a.get("episodes") or 0),
                anomalous_steps=int(a.get("steps") or 0),
                top_anomaly=a.get("top"),
                root_cause_text=str(r.get("root_cause_text") or ""),
                shares={
                    p: float(r[f"share_{p}"])
                    for p in (*STEP_PHASES, "other")
                    if _clean(r.get(f"share_{p}")) is not None
                },
                regression=_baseline_regression(base),
            )
        )
    if not baselines:
        _mark_regressions(runs)
    return FleetReportData(day=day, runs=runs, baselines=baselines, groups=groups)


REGRESSION_RATIO = 1.25
MIN_PRIOR_RUNS = 2


def _baseline_regression(base: dict[str, Any]) -> str:
    """The `run_baselines` verdict: slower per step than earlier runs of its config group or experiment."""
    for scope, label in (("group", "config group"), ("exp", "experiment")):
        ratio = _clean(base.get(f"{scope}_step_ratio"))
        prior = base.get(f"{scope}_prior_runs") or 0
        if ratio is not None and prior >= MIN_PRIOR_RUNS and ratio > REGRESSION_RATIO:
            before = _clean(base.get(f"{scope}_median_step_s"))
            median = f" vs {before:.1f} s" if before is not None else ""
            return f"step time ×{ratio:.2f}{median} over {prior} earlier runs of its {label}"
    return ""


def _mark_regressions(runs: list[FleetRun]) -> None:
    """Flag a run whose median step time is 25 % above the median of earlier runs of its config group."""
    by_group: dict[str, list[FleetRun]] = {}
    for run in sorted(runs, key=lambda r: (r.ended_at or datetime.min, r.run_id)):
        earlier = [x.median_step_s for x in by_group.get(run.config_group, []) if x.median_step_s]
        if run.median_step_s and len(earlier) >= MIN_PRIOR_RUNS:
            base = statistics.median(earlier)
            if base > 0 and run.median_step_s > REGRESSION_RATIO * base:
                run.regression = f"step time {run.median_step_s:.1f} s vs {base:.1f} s before (×{run.median_step_s / base:.2f})"
        by_group.setdefault(run.config_group, []).append(run)
