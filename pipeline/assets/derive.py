"""Derive layer: one asset per `sql/<table>.sql`, per run (partitioned) or across the fleet."""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
)

from pipeline.derive import derive_fleet_table, derive_run_table
from pipeline.lake import fleet_table_path, refresh_catalog, table_dir
from pipeline.partitions import run_partitions
from pipeline.quality import contract_violations, phase_sums_consistent
from pipeline.resources import WarehouseResource

RUN_TABLES = {
    "step_phases": (
        "Per step: every verl timer, shares of the step, bottleneck and throughput.",
        ["step_metrics", "log_lines", "runs"],
    ),
    "step_health": ("Per step: reward, KL, entropy, losses, grad norm, lengths, memory.", ["step_metrics"]),
    "run_events": ("Every error and warning with its class, component, step and phase.", ["log_lines"]),
    "run_summary": (
        "One row per run: failure class, last step, root cause line, bottleneck, goodput.",
        ["runs", "step_phases", "step_health", "run_events", "log_lines"],
    ),
    "config_findings": (
        "Configuration problems the logs show, each with its evidence line.",
        ["runs", "log_lines", "step_metrics", "step_health", "run_events", "run_summary"],
    ),
    "run_advice": (
        "Per run that did not complete: each configuration change to try, from the run's own value.",
        ["run_summary", "config_findings"],
    ),
}
FLEET_TABLES = {
    "fleet_daily": ("Runs per day with failure counts by class.", ["run_summary"]),
    "fleet_weekly": ("Runs per week with failure counts and week-over-week change.", ["run_summary"]),
    "fleet_config_groups": ("Phase shares and step times by config group.", ["run_summary", "step_phases"]),
    "run_baselines": (
        "Each run against earlier runs of the same experiment and config group.",
        ["run_summary", "step_phases"],
    ),
}


def _run_table_asset(name: str, description: str, deps: list[str]) -> AssetsDefinition:
    checks = [AssetCheckSpec("matches_contract", asset=name, blocking=True,
                             description="Has every column of the design contract.")]
    if name == "step_phases":
        checks.append(AssetCheckSpec("phase_sums_consistent", asset=name,
                                     description="Phase shares of each step sum to 1."))

    @asset(
        name=name,
        description=description,
        deps=deps,
        partitions_def=run_partitions,
        backfill_policy=BackfillPolicy.single_run(),
        group_name="derive",
        check_specs=checks,
    )
    def _table(context: AssetExecutionContext, warehouse: WarehouseResource):
        run_ids = list(context.partition_keys)
        rows = derive_run_table(warehouse.root, name, run_ids)
        yield MaterializeResult(
            metadata={
                "runs": len(run_ids),
                "rows": rows,
                "path": MetadataValue.path(str(table_dir(warehouse.root, name))),
                "sql": MetadataValue.path(f"sql/{name}.sql"),
            }
        )
        missing = contract_violations(warehouse.root, name, run_ids)
        yield AssetCheckResult(check_name="matches_contract", passed=not missing,
                               metadata={"missing_columns": MetadataValue.json(missing)})
        if name == "step_phases":
            bad = phase_sums_consistent(warehouse.root, run_ids)
            yield AssetCheckResult(check_name="phase_sums_consistent", passed=not bad,
                                   severity=AssetCheckSeverity.WARN,
                                   metadata={"runs_with_bad_sums": MetadataValue.json(bad)})

    return _table


def _fleet_table_asset(name: str, description: str, deps: list[str]) -> AssetsDefinition:
    @asset(name=name, description=description, deps=deps, group_name="derive")
    def _table(warehouse: WarehouseResource) -> MaterializeResult:
        rows = derive_fleet_table(warehouse.root, name)
        refresh_catalog(warehouse.root)
        return MaterializeResult(
            metadata={
                "rows": rows,
                "path": MetadataValue.path(str(fleet_table_path(warehouse.root, name))),
                "sql": MetadataValue.path(f"sql/{name}.sql"),
            }
        )

    return _table


run_table_assets = [_run_table_asset(n, d, deps) for n, (d, deps) in RUN_TABLES.items()]
fleet_table_assets = [_fleet_table_asset(n, d, deps) for n, (d, deps) in FLEET_TABLES.items()]
