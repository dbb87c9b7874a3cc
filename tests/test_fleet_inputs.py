"""Fleet tables kept up to date run by run: after runs are added, re-derived or removed, the fleet tables read
only those runs' partitions again, and their rows are those of a rebuild from every partition."""

from __future__ import annotations

import shutil
import time

import pyarrow.parquet as pq
import pytest
from rows_support import same

from pipeline import derive, lake, tables

FLEET = derive.FLEET_TABLES


def _rows(warehouse, table: str) -> list[dict]:
    return pq.read_table(lake.fleet_table_path(warehouse, table)).to_pylist()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Six simulated runs analysed up to the fleet tables, then two more added, one re-derived and one removed:
    the fleet tables of that warehouse (reads recorded) and of the same partitions rebuilt from scratch."""
    from lab.simulate import simulate_fleet
    from pipeline.ingest import discover_runs, ingest_run

    out = tmp_path_factory.mktemp("fleet_inputs")
    simulate_fleet(out, runs=8, seed=20261204)
    wh = out / "warehouse"
    entries = discover_runs(out / "archive", quiet_period_s=0, now=time.time() + 10**7).entries
    first, later = entries[:6], entries[6:]
    for entry in first:
        ingest_run(entry, wh)
    derive.derive_run_tables(wh, [e.run_id for e in first])
    derive.derive_fleet_tables(wh)
    before = {t: _rows(wh, t) for t in FLEET}

    for entry in later:
        ingest_run(entry, wh)
    changed = [e.run_id for e in later] + [first[0].run_id]
    derive.derive_run_tables(wh, changed)
    removed = first[1].run_id
    for table in tables.per_run_tables():
        shutil.rmtree(lake.run_partition_dir(wh, table, removed), ignore_errors=True)

    reads = []
    original = lake.table_source

    def recording(warehouse, table, run_ids=None, **kwargs):
        if tables.table(table).per_run and run_ids is not None:  # without run_ids: whether the table is there
            reads.append((table, sorted(run_ids)))
        return original(warehouse, table, run_ids, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(lake, "table_source", recording)
    try:
        derive.derive_fleet_tables(wh)
    finally:
        mp.undo()
    incremental = {t: _rows(wh, t) for t in FLEET}
    shutil.rmtree(wh / lake.FLEET_INPUTS_DIR)
    derive.derive_fleet_tables(wh)
    rebuilt = {t: _rows(wh, t) for t in FLEET}
    present = sorted({e.run_id for e in entries} - {removed})
    return dict(warehouse=wh, before=before, incremental=incremental, rebuilt=rebuilt, reads=reads, changed=sorted(changed),
                ingested=sorted(e.run_id for e in later), present=present, removed=removed)


@pytest.mark.parametrize("table", FLEET)
def test_incremental_fleet_table_rows_equal_a_rebuild(fleet, table):
    got, want = fleet["incremental"][table], fleet["rebuilt"][table]
    assert len(got) == len(want) and got, table
    assert all(same(g, w) for g, w in zip(got, want, strict=True)), table


def test_fleet_tables_hold_every_present_run_and_not_the_removed_one(fleet):
    baselines = fleet["incremental"]["run_baselines"]
    assert sorted(r["run_id"] for r in baselines) == fleet["present"]
    assert sum(r["runs"] for r in fleet["incremental"]["fleet_daily"]) == len(fleet["present"])
    assert sum(r["runs"] for r in fleet["before"]["fleet_daily"]) == 6


def test_only_the_changed_runs_partitions_are_read_again(fleet):
    assert fleet["reads"], "the fleet tables read no per-run table"
    # each per-run table a fleet table reads is read again for the changed runs only
    # the raw tables were written again for the new runs, the derived ones for the re-derived run too
    for table, run_ids in fleet["reads"]:
        assert run_ids == fleet["ingested" if tables.table(table).layer == "raw" else "changed"], table
    read_tables = {t for t, _ in fleet["reads"]}
    # (no anomaly model is fitted here, so the per-run tables that read it are not there to read)
    assert read_tables == {r for name in FLEET for r in tables.table(name).reads
                           if tables.table(r).per_run and not tables.needs_model(r)}


@pytest.mark.parametrize("table", ["runs", "run_summary", "step_phases"])
def test_a_fleet_input_built_a_few_runs_at_a_time_equals_one_read_of_every_partition(fleet, table, monkeypatch):
    """Seven runs read three at a time: three reads of at most three runs, the same rows in the same order as one
    read of every partition."""
    wh = fleet["warehouse"]
    lake.fleet_input_path(wh, table).unlink()
    reads, original = [], lake.table_source
    monkeypatch.setattr(lake, "FLEET_INPUT_CHUNK", 3)
    monkeypatch.setattr(lake, "table_source", lambda w, t, run_ids=None, **kwargs: (
        reads.append(list(run_ids)) if run_ids is not None else None) or original(w, t, run_ids, **kwargs))
    source = lake.fleet_input_source(wh, table)
    assert [len(r) for r in reads] == [3, 3, 1]
    with lake.open_database() as con:
        got = con.sql(f"select * from {source}").fetchall()
        want = con.sql(f"select * from {original(wh, table)}").fetchall()
    assert len(got) == len(want) and repr(got) == repr(want)


def test_a_killed_fleet_input_write_is_swept_and_the_input_kept(tmp_path):
    folder = tmp_path / "warehouse" / lake.FLEET_INPUTS_DIR
    folder.mkdir(parents=True)
    kept = folder / "step_phases.parquet"
    kept.write_bytes(b"PAR1")
    leftover = folder / f".step_phases.parquet.{'a' * 32}.tmp"
    leftover.write_bytes(b"half a file")
    assert lake.sweep_leftovers(tmp_path / "warehouse", now=time.time() + lake.STALE_AFTER_S + 60) == [leftover]
    assert kept.exists() and not leftover.exists()
