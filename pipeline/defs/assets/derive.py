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

from pipeline import tables
from pipeline.defs.partitions import run_partitions
from pipeline.defs.resources import WarehouseResource
from pipeline.derive import derive_fleet_table, derive_run_table, summary_schema
from pipeline.isolation import isolated_runs
from pipeline.lake import fleet_table_path, refresh_catalog, table_dir
from pipeline.quality import contract_violations, phase_sums_consistent


def _contract_check(name: str) -> list[AssetCheckSpec]:
    """The blocking check that the table exists with every contract column (pipeline/tables.py)."""
    return [AssetCheckSpec("matches_contract", asset=name, blocking=True,
                           description="Exists, with every column of the design contract.")]


def _run_table_asset(name: str) -> AssetsDefinition:
    checks = _contract_check(name)
    if name == "step_phases":
        checks.append(AssetCheckSpec("phase_sums_consistent", asset=name,
                                     description="Phase shares of each step sum to 1."))

    @asset(
        name=name,
        description=tables.table(name).description,
        deps=tables.table(name).reads,
        partitions_def=run_partitions,
        backfill_policy=BackfillPolicy.single_run(),
        group_name="derive",
        check_specs=checks,
    )
    def _table(context: AssetExecutionContext, warehouse: WarehouseResource):
        counts, run_ids = isolated_runs(warehouse.root, name, list(context.partition_keys),
                                        lambda ids: derive_run_table(warehouse.root, name, ids), context.log,
                                        lambda run_id: summary_schema(warehouse.root, run_id))
        yield MaterializeResult(
            metadata={
                "runs": len(run_ids),
                "failed_runs": len(context.partition_keys) - len(run_ids),
                "rows": sum(counts),
                "path": MetadataValue.path(str(table_dir(warehouse.root, name))),
                "sql": MetadataValue.path(f"sql/{name}.sql"),
            }
        )
        yield _contract_result(warehouse.root, name, run_ids)
        if name == "step_phases":
            bad = phase_sums_consistent(warehouse.root, run_ids)
            yield AssetCheckResult(check_name="phase_sums_consistent", passed=not bad,
                                   severity=AssetCheckSeverity.WARN,
                                   metadata={"runs_with_bad_sums": MetadataValue.json(bad)})

    return _table


def _contract_result(root, name: str, run_ids: list[str] | None) -> AssetCheckResult:
    """The contract check's result over the partitions just written (the whole table for a fleet table)."""
    missing = contract_violations(root, name, run_ids)
    return AssetCheckResult(check_name="matches_contract", asset_key=name, passed=not missing,
                            metadata={"missing_columns": MetadataValue.json(missing)})


def _fleet_table_asset(name: str) -> AssetsDefinition:
    @asset(name=name, description=tables.table(name).description, deps=tables.table(name).reads,
           group_name="derive", check_specs=_contract_check(name))
    def _table(warehouse: WarehouseResource):
        rows = derive_fleet_table(warehouse.root, name)
        refresh_catalog(warehouse.root)
        yield MaterializeResult(
            metadata={
                "rows": rows,
                "path": MetadataValue.path(str(fleet_table_path(warehouse.root, name))),
                "sql": MetadataValue.path(f"sql/{name}.sql"),
            }
        )
        yield _contract_result(warehouse.root, name, None)

    return _table


run_table_assets = [_run_table_asset(n) for n in tables.sql_tables(per_run=True)]
fleet_table_assets = [_fleet_table_asset(n) for n in tables.sql_tables(per_run=False)]
