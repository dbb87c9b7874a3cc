"""The command line's Dagster instance: Dagster's stock SQLite storage, whose connections to the
instance's files commit without a disk flush, and whose records read back in another process's instance."""

from __future__ import annotations

import sqlite3

from dagster import (
    AssetKey,
    BackfillPolicy,
    DagsterInstance,
    DynamicPartitionsDefinition,
    asset,
    materialize,
)
from sqlalchemy import create_engine, text

from pipeline.analysis import persistent_instance

PARTS = DynamicPartitionsDefinition(name="runs")
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}  # SQLite's pragma values


@asset
def counted() -> None:
    """A trivial asset to materialise."""


@asset(partitions_def=PARTS, backfill_policy=BackfillPolicy.single_run())
def per_run() -> None:
    """A partitioned asset materialised over a range in one Dagster run."""


def _synchronous(db_file) -> str:
    """The synchronous mode a new SQLAlchemy connection to `db_file` gets (what Dagster's storage opens)."""
    engine = create_engine(f"sqlite:///{db_file}")
    try:
        with engine.connect() as conn:
            return SYNCHRONOUS[conn.execute(text("pragma synchronous")).scalar()]
    finally:
        engine.dispose()


def test_the_instance_skips_the_flush_and_its_records_read_back_in_a_stock_instance(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "dagster"
    keys = [f"r{i:03d}" for i in range(30)]
    with persistent_instance(tmp_path / "warehouse") as instance:
        assert type(instance.event_log_storage).__name__ == "SqliteEventLogStorage"  # Dagster's own
        for _ in range(3):
            assert materialize([counted], instance=instance).success
        instance.add_dynamic_partitions("runs", keys)
        assert materialize([per_run], instance=instance, tags={
            "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}).success
        with instance.event_log_storage.index_connection() as conn:
            assert SYNCHRONOUS[conn.execute(text("pragma synchronous")).scalar()] == "OFF"
    assert _synchronous(home / "history" / "runs.db") == "OFF"
    # other SQLite files keep SQLite's default, FULL: the listener is scoped to the instance's folder,
    # and a sibling whose name starts with the folder's is not inside it
    (tmp_path / "dagster2").mkdir()
    assert _synchronous(tmp_path / "dagster2" / "other.db") == "FULL"
    assert _synchronous(tmp_path / "other.db") == "FULL"
    with DagsterInstance.from_config(str(home)) as stock:
        records = stock.fetch_materializations(AssetKey("counted"), limit=10).records
        assert len(records) == 3
        assert len({r.run_id for r in records}) == 3
        assert stock.get_materialized_partitions(AssetKey("per_run")) == set(keys)
    # the files are plain SQLite databases a reader without SQLAlchemy opens too
    with sqlite3.connect(home / "history" / "runs.db") as plain:
        assert plain.execute("select count(*) from runs").fetchone()[0] == 4


def test_an_operators_dagster_yaml_keeps_sqlites_flush(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with persistent_instance(tmp_path / "warehouse") as instance:
        assert materialize([counted], instance=instance).success
    assert _synchronous(home / "history" / "runs.db") == "FULL"
