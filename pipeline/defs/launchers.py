"""Jobs a launcher starts with `dagster job launch`: `run_health_job` (one finished run) and
`analyze_archive_job` (the archive's runs, or a selection of them, as `verl-health analyze` does). Each runs
`analyze_archive`, which analyses the runs in one run of `analyze_batch` in the same instance."""

import datetime as dt
from pathlib import Path

from dagster import Config, OpExecutionContext, job, op
from pydantic import Field

from pipeline.defs.analysis import analyze_archive
from pipeline.defs.assets.detect import NO_STEPS
from pipeline.defs.resources import ArchiveResource, ReportsResource, WarehouseResource
from pipeline.run_entry import entry_root, resolve_entry
from pipeline.run_outcomes import verdict
from pipeline.selection import RunSelection


class RunHealthConfig(Config):
    """Which finished run to analyse: a path to its archive entry, or its run_id in the archive."""

    run: str = Field(description="Path of the run folder / .tar.gz / .gz, or a run_id under the archive root.")


@op(description="Ingest, derive, score and report one finished run through `analyze_batch`, in this instance.")
def analyze_finished_run(
    context: OpExecutionContext,
    config: RunHealthConfig,
    archive: ArchiveResource,
    warehouse: WarehouseResource,
    reports: ReportsResource,
) -> str:
    """Analyse one run end to end: the graph (with its checks) for its `run_id` partition."""
    entry = resolve_entry(config.run, archive.root, archive.quiet_period_s)
    outcome = analyze_archive(entry_root(entry, archive.root), warehouse.root, reports.root, instance=context.instance,
                              include={entry.run_id})
    if outcome.no_model:
        context.log.warning(f"anomaly model: {NO_STEPS}")
    report = Path(reports.root) / "runs" / f"{entry.run_id}.html"
    context.log.info(f"{entry.run_id}: {verdict(warehouse.root, entry.run_id)}; report at {report}")
    return str(report)


@job(description="Analyse one finished run: `dagster job launch -j run_health_job --config-json ...`.")
def run_health_job():
    """The job a training launcher calls when a verl run ends."""
    analyze_finished_run()


class ArchiveSelectionConfig(Config):
    """Which runs of the archive to analyse, as `verl-health analyze --include --since --until` (all by default)."""

    include: str | None = Field(default=None, description="Only the run ids matching this glob (e.g. 'grpo-qwen7b-*').")
    since: str | None = Field(default=None, description="Only runs last active on or after this day (YYYY-MM-DD).")
    until: str | None = Field(default=None, description="Only runs last active on or before this day (YYYY-MM-DD).")

    def selection(self) -> RunSelection:
        """The RunSelection these settings describe (a malformed day raises ValueError)."""
        return RunSelection(self.include, _day(self.since), _day(self.until))


def _day(text: str | None) -> dt.date | None:
    return dt.date.fromisoformat(text) if text else None


@op(description="Ingest, derive, score and report the archive's finished runs that the selection keeps.")
def analyze_selected_runs(
    context: OpExecutionContext,
    config: ArchiveSelectionConfig,
    archive: ArchiveResource,
    warehouse: WarehouseResource,
    reports: ReportsResource,
) -> list[str]:
    """Analyse the selected runs through `analyze_batch`, in this instance; returns their run ids."""
    outcome = analyze_archive(archive.root, warehouse.root, reports.root, instance=context.instance,
                              quiet_period_s=archive.quiet_period_s, select=config.selection())
    context.log.info(f"analysed {len(outcome.run_ids)} runs; fleet report at {outcome.fleet_report}")
    return outcome.run_ids


@job(description="Analyse the archive's runs, or a selection: `--config-json '{\"ops\": {\"analyze_selected_runs\": "
                 "{\"config\": {\"include\": \"grpo-*\", \"since\": \"2026-11-23\"}}}}'`.")
def analyze_archive_job():
    """`verl-health analyze` as a Dagster job, its selection as run config."""
    analyze_selected_runs()
