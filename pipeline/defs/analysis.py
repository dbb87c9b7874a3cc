"""End-to-end analysis outside the daemon: a batch of runs of an archive as one run of `analyze_batch`."""

from __future__ import annotations

import datetime as dt
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dagster import AssetKey, DagsterInstance, Definitions, LoggerDefinition, default_loggers, logger

from pipeline import parquet_schema, tables
from pipeline.defs.assets import ASSET_CHECKS, ASSETS
from pipeline.defs.assets.ingest import ingested_run
from pipeline.defs.assets.report import DAY_TAG, MAIL_TAG
from pipeline.defs.jobs import analyze_batch
from pipeline.defs.partitions import partition_tags, place_batch
from pipeline.defs.resources import bound_resources
from pipeline.defs.storage import plan_ranges_in_one_event
from pipeline.detect.warehouse import discard_damaged_model
from pipeline.incremental import REINGEST_TAG, split_changed
from pipeline.isolation import not_analysed
from pipeline.lake import refresh_catalog, release_databases, sweep_leftovers, table_source
from pipeline.quality import model_age_days, model_refit_due
from pipeline.run_outcomes import outcome_counts
from pipeline.selection import NoRunsError, RunSelection, no_runs_message

# Dagster's console logger prints every step event at DEBUG; the command line shows what the run starts
# doing next, in words, instead (the `progress` logger)
RUN_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}, "progress": {}}}
# Runs one in-process Dagster run analyses at most: the run holds every event it logs in memory until it ends,
# about 190 KB a run (a materialisation per per-run asset and partition), so a larger batch is analysed as
# consecutive runs of this many, each of the whole graph, and memory stays that of this many runs.
MAX_RUNS_PER_RUN = 1000


@dataclass
class ArchiveOutcome:
    """What analysing an archive produced."""

    run_ids: list[str]
    skipped: dict[str, str]  # a run not finished yet, or a file that is not a run (README, labels) -> why
    errors: list[str]
    fleet_report: Path | None
    seconds: float
    unchanged: list[str] = field(default_factory=list)
    no_model: bool = False  # no anomaly model after the analysis (no training step in the warehouse yet)
    # runs a step failed on alone (pipeline/isolation.py) -> the problems saying which step and why
    not_analysed: dict[str, list[str]] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # how the analysed runs ended, in words -> runs


def batch_selection(runs: bool, fleet_tables: bool, fit: bool, fleet_report: bool, mail: bool) -> list[str]:
    """The assets of one batch's run: each run's tables and report when there are runs, the fleet tables when
    they need rebuilding, the model when it is refitted, the fleet report when asked (the last run of a batch
    cut in several), its mail when asked."""
    return [*((*tables.per_run_tables(), "run_report") if runs else ()),
            *(tables.fleet_tables() if fleet_tables else ()), *((tables.MODEL,) if fit else ()),
            *(("fleet_report",) if fleet_report else ()), *(("fleet_report_mail",) if mail else ())]


def _stages(runs: int, unchanged: int, mail: bool) -> dict[str, str]:
    """What the batch's run starts doing at each step, in words: step key -> message (the first step of a
    message says it)."""
    read = (f"reading and diagnosing {runs} run{'s' if runs != 1 else ''}"
            + (f" ({unchanged} unchanged since their last analysis)" if unchanged else ""))
    return {ingested_run.op.name: read, **dict.fromkeys(tables.fleet_tables(), "updating the fleet tables"),
            tables.MODEL: "fitting the anomaly model on the fleet",
            "step_anomalies": "scoring anomalous steps and writing the run reports",
            "fleet_report": "writing the fleet report" + (" and mailing it" if mail else "")}


@contextmanager
def sigterm_kept() -> Iterator[None]:
    """Put SIGTERM's action back as it was once the block ends. An in-process Dagster run in the main thread
    leaves SIGTERM with SIGINT's action, which is "ignore" in a process started as a background job; that
    process and all it starts afterwards then ignore SIGTERM, and Dagster, which stops each step's compute-log
    `tail` processes with SIGTERM, waits 30 s for each of them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, kept)


def progress_logger(say: Callable[[str], None], stages: dict[str, str]) -> LoggerDefinition:
    """A Dagster logger that tells `say` each stage of `stages` as the run starts its first step."""
    said: set[str] = set()

    class StageStarts(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            event = (getattr(record, "dagster_meta", None) or {}).get("dagster_event")
            what = stages.get(event.step_key) if event is not None and event.event_type_value == "STEP_START" else None
            if what and what not in said:
                said.add(what)
                say(what)

    @logger(description="What the run starts doing next, in words, for the command line.")
    def progress(_context):
        log = logging.Logger("verl-health-progress", level=logging.DEBUG)
        log.addHandler(StageStarts())
        return log

    return progress


def analyze_archive(
    archive: str | Path,
    warehouse: str | Path,
    reports: str | Path,
    instance: DagsterInstance | None = None,
    quiet_period_s: int = 0,
    mail: bool = False,
    force: bool = False,
    refit: bool = False,
    day: dt.date | None = None,
    include: set[str] | None = None,
    select: RunSelection | None = None,
    progress: Callable[[str], None] | None = None,
) -> ArchiveOutcome:
    """Analyse every finished run in `archive` that changed since its last analysis, in one Dagster run (one per
    MAX_RUNS_PER_RUN runs, in turn, the first of them fitting the model when that is due, the last writing the
    fleet report).

    The runs to analyse become consecutive run_id partitions (`partitions.place_batch` moves re-analysed
    runs to the end of the order), and one run of the `analyze_batch` job materialises the graph over that
    range: every per-run asset once for the whole range (single-run backfill policy), the fleet tables once,
    the model when a refit is due, both reports, and the mail with `mail`. New runs are scored with the
    stored anomaly model; it is fitted on the fleet when there is none, when it is damaged, when it is older
    than VERL_HEALTH_REFIT_DAYS (as the nightly schedule does), or with `refit`. Fleet tables missing from the
    warehouse are rebuilt even when no run changed. The fleet report is for `day` (default: today when the
    analysis starts, so a run that crosses midnight finds its report). With `include`, only those run_ids are
    analysed (`analyze --run`, `run_health_job`), with `select` only the runs it keeps (`--include GLOB`,
    `--since`, `--until`). An archive with no run, or a selection that keeps none, raises `NoRunsError` before
    anything is written: no report, no mail. The process's Dagster runs plan a range's materialisations in one
    event per asset from then on (`storage.plan_ranges_in_one_event`). `progress` is told what the analysis
    does, in words (the command line prints it).
    """
    say = progress or (lambda _: None)
    started = time.perf_counter()
    day = day or dt.date.today()
    sweep_leftovers(warehouse)
    resources = bound_resources(archive, warehouse, reports, quiet_period_s)
    found = resources["archive"].discover(only=include)
    wanted = [e for e in found.entries if select is None or select.keeps(e)]
    if not wanted:
        raise NoRunsError(no_runs_message(archive, found, include, select))
    finished = [e for e in wanted if e.finished]
    if force:
        run_ids, unchanged = sorted(e.run_id for e in finished), []
    else:
        run_ids, unchanged = split_changed(finished, warehouse, reports)
    skipped = {**found.skipped, **{e.run_id: "not finished yet" for e in wanted if not e.finished}}
    instance = instance or DagsterInstance.ephemeral()
    plan_ranges_in_one_event()
    ordered = place_batch(instance, run_ids) if run_ids else []
    damaged_model = discard_damaged_model(warehouse)
    fit = refit or (bool(ordered or unchanged) and damaged_model) or (
        bool(ordered) and model_refit_due(model_age_days(warehouse)))
    # a fleet table deleted or damaged since the last analysis is rebuilt even when no run changed
    fleet_gone = bool(ordered or unchanged) and any(table_source(warehouse, t) is None for t in tables.fleet_tables())
    rebuild_fleet = bool(ordered) or fit or fleet_gone
    parts = [ordered[i:i + MAX_RUNS_PER_RUN] for i in range(0, len(ordered), MAX_RUNS_PER_RUN)] or [[]]
    for k, part in enumerate(parts):
        # the model is fitted (when due) by the first part, which the others are then scored with; the mail
        # goes with the last part's fleet report
        last = k == len(parts) - 1
        tags = {**(partition_tags(part) if part else {}), **({REINGEST_TAG: "true"} if force and part else {}),
                DAY_TAG: day.isoformat(), **({MAIL_TAG: "true"} if mail and last else {})}
        told = say if len(parts) == 1 else (lambda what, k=k: say(f"part {k + 1} of {len(parts)}: {what}"))
        stages = _stages(len(part), len(unchanged) if k == 0 else 0, mail and last)
        loggers = {**default_loggers(), "progress": progress_logger(told, stages)}
        job = Definitions(assets=ASSETS, asset_checks=ASSET_CHECKS, jobs=[analyze_batch], resources=resources,
                          loggers=loggers).resolve_job_def(analyze_batch.name)
        try:
            with sigterm_kept():
                job.execute_in_process(
                    instance=instance, tags=tags, run_config=RUN_LOGS,
                    asset_selection=[AssetKey(a) for a in batch_selection(
                        runs=bool(part), fleet_tables=rebuild_fleet, fit=fit and k == 0, fleet_report=last,
                        mail=mail and last)])
        finally:
            # what DuckDB's allocators kept from this part's queries, and the schemas of the partitions it read,
            # are not carried into the next part
            release_databases()
            parquet_schema.forget()
    refresh_catalog(warehouse)
    fleet_path = Path(reports) / "fleet" / f"{day.isoformat()}.html"
    return ArchiveOutcome(
        run_ids=ordered,
        skipped=skipped,
        errors=list(found.errors),
        fleet_report=fleet_path if fleet_path.exists() else None,
        seconds=time.perf_counter() - started,
        unchanged=unchanged,
        no_model=model_age_days(warehouse) is None,
        not_analysed=not_analysed(warehouse, ordered),
        outcomes=outcome_counts(warehouse, ordered),
    )


__all__ = ["ArchiveOutcome", "analyze_archive", "batch_selection"]
