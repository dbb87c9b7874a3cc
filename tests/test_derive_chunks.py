"""A batch's per-run tables are derived a bounded chunk of runs at a time, with the rows of one whole batch."""

from __future__ import annotations

import shutil
import time

import pytest
from rows_support import same

from pipeline import derive, lake


def _rows(warehouse, table: str) -> list[tuple]:
    con = lake.connect(warehouse, only=[table])
    try:
        cur = con.execute(f"select * from {table}")
        cols = [d[0] for d in cur.description]
        found = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    return sorted(found, key=repr)


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """Five simulated runs ingested, then derived in one chunk and in chunks of two (connections recorded)."""
    from lab.simulate import simulate_fleet
    from pipeline.ingest import discover_runs, ingest_run

    out = tmp_path_factory.mktemp("derive_chunks")
    simulate_fleet(out, runs=5, seed=20261205)
    whole, chunked = out / "whole", out / "chunked"
    entries = discover_runs(out / "archive", quiet_period_s=0, now=time.time() + 10**7).entries
    for entry in entries:
        ingest_run(entry, whole)
    shutil.copytree(whole, chunked)
    run_ids = [e.run_id for e in entries]
    derive.derive_run_tables(whole, run_ids)
    connected = []
    original = derive._connect
    mp = pytest.MonkeyPatch()
    mp.setattr(derive, "RUN_CHUNK", 2)
    mp.setattr(derive, "_connect", lambda wh, names, ids=None: connected.append(list(ids)) or original(wh, names, ids))
    try:
        derive.derive_run_tables(chunked, run_ids)
        for name in derive.RUN_TABLES:  # as the assets call it, one table at a time over the batch
            derive.derive_run_table(chunked, name, run_ids)
    finally:
        mp.undo()
    return dict(whole=whole, chunked=chunked, connected=connected, run_ids=run_ids)


def test_no_connection_holds_more_runs_than_a_chunk(batches):
    assert batches["connected"] and max(len(ids) for ids in batches["connected"]) == 2
    # every run is derived, once per pass: derive_run_tables, then each table alone
    assert sorted(r for ids in batches["connected"] for r in ids) == sorted(
        batches["run_ids"] * (1 + len(derive.RUN_TABLES)))


@pytest.mark.parametrize("table", derive.RUN_TABLES)
def test_chunked_rows_equal_one_batch(batches, table):
    got, want = _rows(batches["chunked"], table), _rows(batches["whole"], table)
    assert len(got) == len(want)
    assert {r["run_id"] for r in want} <= set(batches["run_ids"])
    assert all(same(g, w) for g, w in zip(got, want, strict=True)), table
