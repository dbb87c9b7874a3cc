"""Derive reads only the partitions of the runs it derives: the per-run work of a batch does not grow with the
warehouse, and another run's partition (broken, or being rewritten) does not stand in its way."""

from __future__ import annotations

import pyarrow.parquet as pq

from pipeline import derive, lake
from tests.test_derive import completed_run, oom_run


def test_a_batch_reads_only_its_runs_partitions(tmp_path):
    """done-b (4 steps, completed) derived while every file of oom-a is garbage: its rows are the ones its log
    gives; oom-a's broken files are never opened."""
    for b in (oom_run(), completed_run()):
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["oom-a"])
    for table in lake.per_run_tables():
        for part in lake.run_partition_dir(tmp_path, table, "oom-a").glob("*.parquet"):
            part.write_bytes(b"not a parquet file")
    counts = derive.derive_run_tables(tmp_path, ["done-b"])
    assert counts["step_phases"] == 4 and counts["run_summary"] == 1
    con = lake.connect(tmp_path, run_ids=["done-b"])
    assert con.execute("select failure_class, last_step from run_summary").fetchall() == [("completed", 4)]


def test_a_table_without_the_batchs_runs_reads_as_no_rows(tmp_path):
    """A table that holds other runs but none of the batch's (step_phases of oom-a only, when only run_summary
    is derived for done-b): run_summary still finds the table, and writes done-b's one row."""
    for b in (oom_run(), completed_run()):
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["oom-a"])
    rows = {name: derive.derive_run_table(tmp_path, name, ["done-b"])
            for name in ("step_health", "run_events", "run_summary")}
    assert rows["run_summary"] == 1
    con = lake.connect(tmp_path, run_ids=["done-b"])
    assert con.execute("select run_id from run_summary").fetchall() == [("done-b",)]


def test_rederiving_a_batch_counts_its_rows_and_leaves_one_file_per_run(tmp_path):
    """oom-a (3 steps) and done-b (4 steps) derived twice: the second pass reports 7 step_phases rows and one
    run_summary row per run, each table's rows as its files hold them (read here by pyarrow), every partition
    one file, and nothing left of the partitions it replaced or of its staging."""
    for b in (oom_run(), completed_run()):
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["oom-a", "done-b"])
    counts = derive.derive_run_tables(tmp_path, ["oom-a", "done-b"])
    assert (counts["step_phases"], counts["run_summary"]) == (7, 2)
    for table in derive.RUN_TABLES:
        folder = lake.table_dir(tmp_path, table)
        assert sorted(p.name for p in folder.iterdir()) == [".locks", "run_id=done-b", "run_id=oom-a"], table
        files = [f for part in folder.glob("run_id=*") for f in part.iterdir()]
        assert len(files) == 2, table
        assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == counts[table], table


def test_rows_of_runs_not_asked_for_are_neither_kept_nor_counted(tmp_path, monkeypatch):
    """A query that returns one row of done-b and two of a run not asked for: derive counts 1 row and writes
    done-b's partition only."""
    completed_run().write(tmp_path)
    monkeypatch.setattr(derive, "sql_text", lambda name: (
        "select * from (values ('done-b', 1), ('other', 2), ('other', 3)) as t(run_id, x)"
        " where len($rules) > 0 and len($config_keys) = len($config_paths)"))
    assert derive.derive_run_table(tmp_path, "run_advice", ["done-b"]) == 1
    folder = lake.table_dir(tmp_path, "run_advice")
    assert sorted(p.name for p in folder.iterdir()) == [".locks", "run_id=done-b"]
