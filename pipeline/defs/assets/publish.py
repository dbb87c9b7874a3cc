"""Publish layer: the warehouse's Parquet copied to its s3:// URL, when it has one."""

from dagster import MaterializeResult, asset

from pipeline.defs.resources import WarehouseResource


@asset(deps=["fleet_report", "run_report"], group_name="report")
def published_warehouse(warehouse: WarehouseResource) -> MaterializeResult:
    """The warehouse's tables and model in the object store (a no-op for a local warehouse)."""
    counts = warehouse.publish()
    if counts is None:
        return MaterializeResult(metadata={"published": False, "reason": "local warehouse"})
    return MaterializeResult(metadata={"published": True, "url": warehouse.path, **counts})
