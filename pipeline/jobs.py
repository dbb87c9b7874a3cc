"""Jobs: per-run assets (the sensor's), the nightly fleet job, and `run_health_job` for launchers."""

from dagster import (
    AssetKey,
    AssetMaterialization,
    Config,
    OpExecutionContext,
    define_asset_job,
    job,
    op,
)
from pydantic import Field

from pipeline.analysis import analyze_entry, resolve_entry
from pipeline.partitions import RUN_PARTITIONS_NAME
from pipeline.resources import ArchiveResource, ReportsResource, WarehouseResource

PER_RUN_ASSETS = [
    "runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
    "config_findings", "run_advice", "step_anomalies", "run_report",
]
FLEET_ASSETS = ["fleet_daily", "fleet_weekly", "fleet_config_groups", "run_baselines"]
NIGHTLY_ASSETS = [*FLEET_ASSETS, "fleet_report", "fleet_report_mail", "published_warehouse"]

run_assets_job = define_asset_job(
    "run_assets_job",
    selection=PER_RUN_ASSETS,
    description="Ingest, derive, score and report the selected runs (one partition per run).",
)

nightly_job = define_asset_job(
    "nightly_job",
    selection=[*NIGHTLY_ASSETS, "anomaly_model"],
    description="Rebuild the fleet tables, refit the model when due, render and mail the fleet report.",
)


class RunHealthConfig(Config):
    """Which finished run to analyse: a path to its archive entry, or its run_id in the archive."""

    run: str = Field(description="Path of the run folder / .tar.gz / .gz, or a run_id under the archive root.")


@op(description="Ingest, derive, score and report one finished run; records its asset materializations.")
def analyze_finished_run(
    context: OpExecutionContext,
    config: RunHealthConfig,
    archive: ArchiveResource,
    warehouse: WarehouseResource,
    reports: ReportsResource,
) -> str:
    """Analyse one run end to end and register it as a `run_id` partition."""
    entry = resolve_entry(config.run, archive.root, archive.quiet_period_s)
    context.instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, [entry.run_id])
    outcome = analyze_entry(entry, warehouse.root, reports.root, archive.limits())
    for asset_name, metadata in outcome.materializations.items():
        context.log_event(
            AssetMaterialization(asset_key=AssetKey(asset_name), partition=entry.run_id, metadata=metadata)
        )
    context.log.info(f"{entry.run_id}: {outcome.verdict}; report at {outcome.report_path}")
    return str(outcome.report_path)


@job(description="Analyse one finished run: `dagster job launch -j run_health_job --config-json ...`.")
def run_health_job():
    """The job a training launcher calls when a verl run ends."""
    analyze_finished_run()
