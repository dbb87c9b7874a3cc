"""The command line's Dagster event log: what it records reads back with Dagster's own SQLite storage, and
its connections commit without a disk flush."""

from __future__ import annotations

from dagster import (
    AssetKey,
    BackfillPolicy,
    DagsterInstance,
    DynamicPartitionsDefinition,
    asset,
    materialize,
)
from dagster._core.instance.ref import InstanceRef

from pipeline.dagster_storage import UnflushedSqliteEventLogStorage, event_log_override

PARTS = DynamicPartitionsDefinition(name="runs")


@asset
def counted() -> None:
    """A trivial asset to materialise."""


@asset(partitions_def=PARTS, backfill_policy=BackfillPolicy.single_run())
def per_run() -> None:
    """A partitioned asset materialised over a range in one Dagster run (its events come in a batch)."""


def test_events_read_back_with_the_stock_storage_and_skip_the_flush(tmp_path):
    home = str(tmp_path)
    keys = [f"r{i:03d}" for i in range(30)]
    with DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=event_log_override(home))) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, UnflushedSqliteEventLogStorage)
        for _ in range(3):
            assert materialize([counted], instance=instance).success
        instance.add_dynamic_partitions("runs", keys)
        assert materialize([per_run], instance=instance, tags={
            "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}).success
        with storage.index_connection() as conn:
            assert conn.exec_driver_sql("pragma synchronous").scalar() == 0  # OFF
    with DagsterInstance.from_config(home) as stock:
        assert type(stock.event_log_storage).__name__ == "SqliteEventLogStorage"
        records = stock.fetch_materializations(AssetKey("counted"), limit=10).records
        assert len(records) == 3
        assert len({r.run_id for r in records}) == 3
        assert stock.get_materialized_partitions(AssetKey("per_run")) == set(keys)
