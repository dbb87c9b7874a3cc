"""Views over the warehouse: the DuckDB catalog (`lake.refresh_catalog`), a view per present table rewritten
only when the set of tables changes, and `lake.connect` limited to the tables a reader names."""

from __future__ import annotations

import os

import duckdb
import pyarrow as pa

from pipeline import lake


def _views(wh) -> dict[str, int]:
    con = duckdb.connect(str(wh / lake.CATALOG_FILE), read_only=True)
    try:
        names = [n for (n,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()]
        return {n: con.execute(f"select count(*) from {n}").fetchone()[0] for n in names}
    finally:
        con.close()


def test_catalog_follows_new_runs_and_new_tables_and_is_left_alone_otherwise(tmp_path):
    """One run of step_health (2 rows): a view of 2 rows. A second run (3 rows): the same file, now 5 rows.
    A fleet table written since (1 row): the catalog is written again with its view; the table gone, without."""
    wh = tmp_path / "wh"
    lake.write_run_table(wh, "step_health", "run-a", pa.table({"step": [1, 2]}))
    catalog = lake.refresh_catalog(wh)
    assert _views(wh) == {"step_health": 2}
    first = catalog.stat()

    lake.write_run_table(wh, "step_health", "run-b", pa.table({"step": [1, 2, 3]}))
    lake.refresh_catalog(wh)
    assert catalog.stat().st_ino == first.st_ino and catalog.stat().st_mtime_ns == first.st_mtime_ns
    assert _views(wh) == {"step_health": 5}

    lake.write_fleet_table(wh, "fleet_daily", pa.table({"day": ["2026-12-01"], "runs": [2]}))
    lake.refresh_catalog(wh)
    assert catalog.stat().st_ino != first.st_ino
    assert _views(wh) == {"step_health": 5, "fleet_daily": 1}

    lake.fleet_table_path(wh, "fleet_daily").unlink()
    lake.refresh_catalog(wh)
    assert _views(wh) == {"step_health": 5}


def test_a_catalog_held_open_for_writing_is_replaced(tmp_path):
    """Someone's shell holding the catalog open read-write: the refresh cannot read it, and writes it anew."""
    wh = tmp_path / "wh"
    lake.write_run_table(wh, "step_health", "run-a", pa.table({"step": [1, 2]}))
    lake.refresh_catalog(wh)
    lake.write_fleet_table(wh, "fleet_daily", pa.table({"day": ["2026-12-01"], "runs": [1]}))
    holder = duckdb.connect(str(wh / lake.CATALOG_FILE))
    try:
        lake.refresh_catalog(wh)
    finally:
        holder.close()
    assert _views(wh) == {"step_health": 2, "fleet_daily": 1}


def test_connect_binds_only_the_tables_named(tmp_path):
    """The fleet report's connection names run_summary and fleet_daily: log_lines, whose file is garbage here,
    is never bound, and the named tables read their rows (2 and 1)."""
    wh = tmp_path / "wh"
    lake.write_run_table(wh, "run_summary", "run-a", pa.table({"last_step": [3]}))
    lake.write_run_table(wh, "run_summary", "run-b", pa.table({"last_step": [5]}))
    lake.write_fleet_table(wh, "fleet_daily", pa.table({"runs": [2]}))
    lake.write_run_table(wh, "log_lines", "run-a", pa.table({"text": ["x"]}))
    next(lake.run_partition_dir(wh, "log_lines", "run-a").glob("*.parquet")).write_bytes(b"not parquet")
    con = lake.connect(wh, only=("run_summary", "fleet_daily"))
    assert con.execute("select sum(last_step) from run_summary").fetchone() == (8,)
    assert con.execute("select runs from fleet_daily").fetchone() == (2,)
    views = {n for (n,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert views == {"run_summary", "fleet_daily"}


def test_an_unchanged_catalog_is_not_opened_again_and_a_replaced_one_is(tmp_path, monkeypatch):
    """Refreshed again with nothing changed, the catalog is not even opened; replaced meanwhile by another
    writer's catalog without views, it is read, and written again with the view of step_health (2 rows)."""
    wh = tmp_path / "wh"
    lake.write_run_table(wh, "step_health", "run-a", pa.table({"step": [1, 2]}))
    lake.refresh_catalog(wh)
    opened = []
    read = lake._catalog_sources
    monkeypatch.setattr(lake, "_catalog_sources", lambda catalog: opened.append(catalog) or read(catalog))
    lake.refresh_catalog(wh)
    assert opened == []
    other = wh / "other.duckdb"
    duckdb.connect(str(other)).close()
    os.replace(other, wh / lake.CATALOG_FILE)
    lake.refresh_catalog(wh)
    assert len(opened) == 1 and _views(wh) == {"step_health": 2}


def test_a_table_whose_partitions_hold_no_file_has_no_run_and_no_view(tmp_path):
    """A per-run table of empty partition folders (a swap's leftovers) is not there: no run, no view; one
    partition with a file anywhere among them makes it there, and `a_run_of` names that run."""
    table = lake.table_dir(tmp_path, "run_summary")
    for rid in ("a", "b", "c"):
        (table / f"run_id={rid}").mkdir(parents=True)
    (table / "run_id=b" / "notes.txt").write_text("not parquet")
    assert not lake.has_a_run(tmp_path, "run_summary") and lake.a_run_of(tmp_path, "run_summary") is None
    assert lake.table_source(tmp_path, "run_summary") is None
    assert not lake.has_a_run(tmp_path, "step_phases")
    lake.write_run_table(tmp_path, "run_summary", "c", pa.table({"x": [1]}))
    assert lake.has_a_run(tmp_path, "run_summary") and lake.a_run_of(tmp_path, "run_summary") == "c"
    with lake.reader(tmp_path, only=["run_summary"]) as con:
        assert con.execute("select run_id, x from run_summary").fetchall() == [("c", 1)]
