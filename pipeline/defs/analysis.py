"""End-to-end analysis outside the daemon: a whole archive in-process, or one finished run."""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterInstance, materialize

from pipeline import objectstore
from pipeline.defs.assets import (
    ASSET_CHECKS,
    ASSETS,
    FLEET_AFTER_MODEL,
    FLEET_BEFORE_MODEL,
    RUN_AFTER_MODEL,
    RUN_BEFORE_MODEL,
)
from pipeline.defs.assets.report import DAY_TAG, MAIL_TAG
from pipeline.defs.partitions import RUN_PARTITIONS_NAME
from pipeline.defs.resources import bound_resources
from pipeline.defs.storage import plan_ranges_in_one_event, skip_flush_under
from pipeline.detect.warehouse import discard_damaged_model
from pipeline.incremental import REINGEST_TAG, split_changed
from pipeline.isolation import not_analysed
from pipeline.lake import connect, refresh_catalog, sweep_leftovers, table_source
from pipeline.quality import model_age_days, model_refit_due
from pipeline.tables import MODEL

# Dagster's console logger prints every step event at DEBUG; the command line shows a summary instead.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# Dagster's run tags that select a range of partitions (plain strings, as its docs give them)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"

@dataclass
class RunSelection:
    """Which runs of an archive to analyse: run ids matching a glob, last active within dates (inclusive)."""

    include: str | None = None
    since: dt.date | None = None
    until: dt.date | None = None

    def keeps(self, entry) -> bool:
        """Whether the archive entry is selected (its last activity is its modification time)."""
        day = dt.datetime.fromtimestamp(entry.mtime).date()
        return ((self.include is None or fnmatch.fnmatchcase(entry.run_id, self.include))
                and (self.since is None or day >= self.since) and (self.until is None or day <= self.until))


class NoRunsError(ValueError):
    """The archive holds no run, or the selection keeps none of its runs: nothing to analyse or report."""


def no_runs_message(archive: str | Path, found, include: set[str] | None, select: RunSelection | None) -> str:
    """What was looked for and what was found instead, for an analysis that found no run to analyse."""
    looked = [f"runs in {archive}"]
    if include is not None:
        looked.append(f"run_id {' or '.join(sorted(include))}")
    if select is not None and select.include is not None:
        looked.append(f"run_id matching {select.include!r}")
    if select is not None and select.since is not None:
        looked.append(f"last active on or after {select.since.isoformat()}")
    if select is not None and select.until is not None:
        looked.append(f"last active on or before {select.until.isoformat()}")
    seen = f"the archive holds {len(found.entries)} run entr{'y' if len(found.entries) == 1 else 'ies'}"
    if found.skipped:
        seen += f" and {len(found.skipped)} other file{'s' if len(found.skipped) != 1 else ''} ({', '.join(sorted(found.skipped)[:5])})"
    problems = f"; archive problems: {'; '.join(found.errors)}" if found.errors else ""
    return f"no run to analyse: looked for {', '.join(looked)}; {seen}{problems}"


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

def resolve_entry(run: str, archive_root: str | Path, quiet_period_s: int = 600):
    """The archive entry for a path to a run (folder, .tar.gz, .gz) or a run_id under `archive_root`."""
    from pipeline.ingest import discover_runs

    path = Path(run)
    if path.exists():
        found = discover_runs(path.parent, quiet_period_s=0)
        for entry in found.entries:
            if Path(entry.path).resolve() == path.resolve():
                return entry
        raise ValueError(f"{run} is not a run entry that verl-health can read: {found.errors}")
    found = discover_runs(archive_root, quiet_period_s=quiet_period_s)
    for entry in found.entries:
        if entry.run_id == run:
            return entry
    raise ValueError(f"no run {run!r} under the archive {archive_root}")

def partition_tags(run_ids: list[str]) -> dict[str, str]:
    """Dagster run tags that select exactly `run_ids`, consecutive partitions (a range, or one key)."""
    if len(run_ids) == 1:
        return {"dagster/partition": run_ids[0]}
    return {RANGE_START_TAG: run_ids[0], RANGE_END_TAG: run_ids[-1]}


def contiguous_ranges(partitions: list[str], wanted: set[str]) -> list[list[str]]:
    """The wanted partitions as stretches of consecutive partitions, so a range selects no other run."""
    ranges: list[list[str]] = []
    previous_wanted = False
    for key in partitions:
        if key in wanted:
            if previous_wanted:
                ranges[-1].append(key)
            else:
                ranges.append([key])
        previous_wanted = key in wanted
    return ranges

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
    """Materialise every asset in-process for every finished run in `archive`.

    Per-run assets run as one Dagster run over the whole partition range (single-run backfill
    policy), so a thousand runs cost four Dagster runs, not thousands. New runs are scored with the
    stored anomaly model; it is fitted on the fleet when there is none, when it is older than
    VERL_HEALTH_REFIT_DAYS (as the nightly schedule does), or with `refit`. The fleet report is for
    `day` (default: today when the analysis starts, so a run that crosses midnight finds its report).
    With `include`, only those run_ids are analysed (`analyze --run`, `run_health_job`), with `select`
    only the runs it keeps (`--include GLOB`, `--since`, `--until`): the same asset jobs, checks,
    "already done" rule and refit rule as for a whole archive. An archive with no run, or a selection that
    keeps none, raises `NoRunsError` before anything is written: no report, no mail. The process's Dagster
    runs plan a range's materialisations in one event per asset from then on
    (`dagster_storage.plan_ranges_in_one_event`). `progress` is told what the analysis starts doing next,
    in words (the command line prints it).
    """
    say = progress or (lambda _: None)
    started = time.perf_counter()
    day = day or dt.date.today()
    sweep_leftovers(warehouse)
    resources = bound_resources(archive, warehouse, reports, quiet_period_s)
    found = resources["archive"].discover()
    wanted = [e for e in found.entries if (include is None or e.run_id in include)
              and (select is None or select.keeps(e))]
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
    existing = set(instance.get_dynamic_partitions(RUN_PARTITIONS_NAME))
    instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, [r for r in run_ids if r not in existing])
    # The range tags select by partition order: one range per stretch of consecutive runs of ours.
    ranges = contiguous_ranges(instance.get_dynamic_partitions(RUN_PARTITIONS_NAME), set(run_ids))
    ordered = [r for stretch in ranges for r in stretch]

    def _run(selection: list[str], tags: dict | None = None) -> None:
        materialize([*ASSETS, *ASSET_CHECKS], instance=instance, resources=resources, selection=selection, tags=tags,
                    run_config=QUIET_LOGS)

    # Dagster runs one partitions definition per run: the per-run and the fleet assets alternate,
    # split where the tables read the anomaly model (pipeline/tables.py says which do).
    if ordered:
        say(f"reading and diagnosing {len(ordered)} run{'s' if len(ordered) != 1 else ''}"
            + (f" ({len(unchanged)} unchanged since their last analysis)" if unchanged else ""))
    for stretch in ranges:
        ingest_tags = {**partition_tags(stretch), REINGEST_TAG: "true"} if force else partition_tags(stretch)
        _run(RUN_BEFORE_MODEL, ingest_tags)
    damaged_model = discard_damaged_model(warehouse)
    fit = refit or (bool(ordered or unchanged) and damaged_model) or (
        bool(ordered) and model_refit_due(model_age_days(warehouse)))
    # a fleet table deleted or damaged since the last analysis is rebuilt even when no run changed
    fleet_gone = bool(ordered or unchanged) and any(table_source(warehouse, t) is None for t in FLEET_BEFORE_MODEL)
    if ordered or fit or fleet_gone:
        say("fitting the anomaly model on the fleet" if fit else "updating the fleet tables")
        _run([*FLEET_BEFORE_MODEL, MODEL] if fit else FLEET_BEFORE_MODEL)
    if ordered:
        say("scoring anomalous steps and writing the run reports")
    for stretch in ranges:
        _run([*RUN_AFTER_MODEL, "run_report"], partition_tags(stretch))
    say("writing the fleet report" + (" and mailing it" if mail else ""))
    fleet_selection = [*FLEET_AFTER_MODEL, "fleet_report", *(["fleet_report_mail"] if mail else [])]
    _run(fleet_selection, {DAY_TAG: day.isoformat(), **({MAIL_TAG: "true"} if mail else {})})
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

def entry_root(entry, archive_root: str | Path) -> Path:
    """The folder to analyse `entry` from: the archive root when the entry is in it, else its own folder."""
    return Path(archive_root) if Path(archive_root, Path(entry.path).name).exists() else Path(entry.path).parent


def _summaries(warehouse: str | Path, run_ids: list[str]) -> list[dict]:
    """The run_summary rows of `run_ids`, each with its number of anomaly episodes."""
    if not run_ids:
        return []
    con = connect(warehouse, run_ids=run_ids)
    try:
        views = {v for (v,) in con.execute("select view_name from duckdb_views()").fetchall()}
        episodes = ("select run_id, count(distinct episode_id) as n_episodes from step_anomalies "
                    "where is_anomaly group by all" if "step_anomalies" in views
                    else "select null::varchar as run_id, 0 as n_episodes where false")
        cur = con.execute(f"select s.*, coalesce(e.n_episodes, 0) as n_episodes from run_summary as s "
                          f"left join ({episodes}) as e using (run_id) where s.run_id in (select unnest($r))",
                          {"r": run_ids})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def outcome_counts(warehouse: str | Path, run_ids: list[str]) -> dict[str, int]:
    """How the runs ended, in the words of their reports, most frequent first: {'CUDA OOM': 2, ...}."""
    from pipeline.report.labels import outcome_label

    ended = Counter(outcome_label(s["failure_class"], s.get("failure_detail")) for s in _summaries(warehouse, run_ids))
    return dict(ended.most_common())


def verdict(warehouse: str | Path, run_id: str) -> str:
    """How an analysed run ended, in the words of its report's banner: 'CUDA OOM in old_log_prob at step 0'."""
    from pipeline.report.verdict import verdict as banner

    found = _summaries(warehouse, [run_id])
    if not found:
        return "no summary"
    return banner(found[0], found[0]["n_episodes"])["sentence"].rstrip(".")


def persistent_instance(warehouse: str | Path) -> DagsterInstance:
    """The Dagster instance the command line records its runs in, so `make ui` shows them: $DAGSTER_HOME,
    else `dagster/` beside the warehouse folder (data/dagster for data/warehouse). Without a dagster.yaml
    there, Dagster's default SQLite storage writes its files under that folder without a disk flush per
    commit (pipeline.defs.storage); a dagster.yaml is the operator's and is kept as it says."""
    home = os.environ.get("DAGSTER_HOME") or str(Path(warehouse).resolve().parent / "dagster")
    Path(home).mkdir(parents=True, exist_ok=True)
    if not Path(home, "dagster.yaml").exists():
        skip_flush_under(home)
    return DagsterInstance.from_config(home)


def analyze_with_object_store(archive: str, warehouse: str, reports: str | Path, quiet_period_s: int = 0,
                              cache_dir: str | Path | None = None, **options):
    """`analyze_archive` where the archive and/or the warehouse are s3:// URLs: mirror, analyse, publish.

    `options` go on to `analyze_archive` (mail, force, refit). Returns the `ArchiveOutcome` and the
    publish counts (None for a local warehouse).
    """
    def local(location: str, kind: str) -> Path:
        if not objectstore.is_url(location):
            return Path(location)
        return Path(cache_dir) / kind if cache_dir else objectstore.default_cache_dir(location, kind)

    local_archive = local(archive, "archive")
    if objectstore.is_url(archive):
        local_archive = objectstore.stage_archive(archive, local_archive)
    local_warehouse = local(warehouse, "warehouse")
    outcome = analyze_archive(local_archive, local_warehouse, reports, quiet_period_s=quiet_period_s, **options)
    published = None
    if objectstore.is_url(warehouse):
        published = objectstore.publish_warehouse(local_warehouse, warehouse)
    return outcome, published


__all__ = ["NoRunsError", "analyze_archive", "analyze_with_object_store", "entry_root", "persistent_instance", "resolve_entry",
           "verdict"]
