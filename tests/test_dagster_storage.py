"""The command line's Dagster instance: Dagster's stock SQLite storage, whose connections to the
instance's files commit without a disk flush, and whose records read back in another process's instance."""

from __future__ import annotations

import sqlite3

import pytest
from dagster import (
    AssetKey,
    BackfillPolicy,
    DagsterEventType,
    DagsterInstance,
    DynamicPartitionsDefinition,
    asset,
    materialize,
)
from sqlalchemy import create_engine, text

from lab.simulate import simulate_fleet
from pipeline.defs.analysis import analyze_archive
from pipeline.defs.instance import persistent_instance
from pipeline.defs.storage import PLANNED_AS_ONE_EVENT

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


# The per-run assets (DESIGN.md's per-run tables and the pipeline's own), each planned for every run of a batch
PER_RUN_ASSETS = {"runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
                  "config_findings", "run_advice", "run_samples", "step_anomalies", "run_report"}


def _planned(instance) -> list[tuple[str, str | None, int]]:
    """(asset, partition, partitions in its subset) of every planned-materialisation event in the instance."""
    out = []
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED):
            data = entry.dagster_event.event_specific_data
            subset = data.partitions_subset
            out.append((data.asset_key.to_user_string(), data.partition,
                        len(subset.get_partition_keys()) if subset is not None else 0))
    return out


@pytest.mark.parametrize("setting", [None, "false"])
def test_analyze_plans_a_batchs_materialisations_in_one_event_per_asset(tmp_path, monkeypatch, setting):
    """A batch of 3 runs records one planned event per per-run asset holding all 3 partitions (not 3 events),
    every partition is materialised all the same, and an environment that says otherwise is obeyed."""
    monkeypatch.delenv(PLANNED_AS_ONE_EVENT, raising=False)
    if setting is not None:
        monkeypatch.setenv(PLANNED_AS_ONE_EVENT, setting)
    labels = simulate_fleet(tmp_path / "sim", runs=3, seed=8)
    runs = set(labels["runs"])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with persistent_instance(tmp_path / "wh") as instance:
        analyze_archive(tmp_path / "sim" / "archive", tmp_path / "wh", tmp_path / "rep", instance=instance)
        planned = [p for p in _planned(instance) if p[0] in PER_RUN_ASSETS]
        if setting is None:
            assert sorted(planned) == sorted((a, None, 3) for a in PER_RUN_ASSETS)
        else:
            assert sorted(planned) == sorted((a, r, 0) for a in PER_RUN_ASSETS for r in runs)
        for name in PER_RUN_ASSETS:
            assert instance.get_materialized_partitions(AssetKey(name)) == runs, name
