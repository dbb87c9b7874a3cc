"""One run that breaks a batched step is isolated: the rest of its batch is analysed and reported, and the run is
marked as not analysed (runs.problems, run_summary.analysis_error, the fleet report) and redone next time."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from pipeline.isolation import isolate
from tests.conftest import SHARED

RUNS = ("16_opd_qwen_1_5b_normal_12steps_wandb_output", "27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit",
        "29_charcount_smollm135m_grpo_start_to_step1_no_ansi")


def test_isolate_retries_halves_down_to_the_one_failing_item():
    calls = []

    def work(group):
        calls.append(group)
        if 5 in group:
            raise ValueError("item 5 is bad")
        return sum(group)

    results, failed = isolate(list(range(8)), work)
    assert failed == {5: "ValueError: item 5 is bad"}
    assert sum(results) == sum(range(8)) - 5
    # every good item was done exactly once
    done = [i for group in calls if 5 not in group for i in group]
    assert sorted(done) == [0, 1, 2, 3, 4, 6, 7]


def _summary(warehouse, run_id):
    con = duckdb.connect()
    try:
        return con.execute(
            "select analysis_error, last_step from read_parquet($p, union_by_name=true)",
            {"p": str(warehouse / "run_summary" / f"run_id={run_id}" / "*.parquet")}).fetchone()
    finally:
        con.close()


def test_a_run_that_breaks_a_derived_table_leaves_the_batch_analysed(tmp_path, monkeypatch):
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    from pipeline import derive
    from pipeline.defs.analysis import analyze_archive

    archive, warehouse, reports = tmp_path / "archive", tmp_path / "warehouse", tmp_path / "reports"
    archive.mkdir()
    for run_id in RUNS:
        shutil.copy(SHARED / "real-logs" / f"{run_id}.log", archive / f"{run_id}.log")
    good_a, bad, good_b = RUNS
    real_write = derive._write_query

    def breaks_on_bad(con, name, params, run_ids, staging):
        if name == "step_health" and bad in run_ids:
            raise RuntimeError("boom in step_health")
        return real_write(con, name, params, run_ids, staging)

    monkeypatch.setattr(derive, "_write_query", breaks_on_bad)
    first = analyze_archive(archive, warehouse, reports)
    assert sorted(first.run_ids) == sorted(RUNS)
    assert list(first.not_analysed) == [bad]
    assert first.not_analysed[bad] == ["could not be analysed: step_health failed: RuntimeError: boom in step_health"]
    # the others have every table and a report; the bad one keeps its summary, marked, and its report
    for run_id in (good_a, good_b):
        assert _summary(warehouse, run_id)[0] is None
        assert (warehouse / "step_health" / f"run_id={run_id}").is_dir()
    assert _summary(warehouse, bad)[0] == first.not_analysed[bad][0]
    assert not (warehouse / "step_health" / f"run_id={bad}").exists()
    assert all((reports / "runs" / f"{r}.html").is_file() for r in RUNS)
    fleet = first.fleet_report.read_text()
    assert 'id="not-analysed"' in fleet and "boom in step_health" in fleet

    monkeypatch.setattr(derive, "_write_query", real_write)
    second = analyze_archive(archive, warehouse, reports)
    assert second.run_ids == [bad] and second.unchanged == sorted([good_a, good_b])
    assert second.not_analysed == {}
    assert _summary(warehouse, bad)[0] is None
    assert (warehouse / "step_health" / f"run_id={bad}").is_dir()
    assert 'id="not-analysed"' not in second.fleet_report.read_text()


def test_a_step_that_fails_on_every_run_fails_the_analysis(tmp_path, monkeypatch):
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    from dagster import DagsterError

    from pipeline import derive
    from pipeline.defs.analysis import analyze_archive

    archive = tmp_path / "archive"
    archive.mkdir()
    for run_id in RUNS[1:]:
        shutil.copy(SHARED / "real-logs" / f"{run_id}.log", archive / f"{run_id}.log")

    def broken(con, name, params, run_ids, staging):
        raise RuntimeError(f"{name} is broken")

    monkeypatch.setattr(derive, "_write_query", broken)
    with pytest.raises((RuntimeError, DagsterError), match="failed on each of the 2 runs"):
        analyze_archive(archive, tmp_path / "warehouse", tmp_path / "reports")


def test_a_run_whose_ingest_fails_is_listed_and_the_fleet_reported(tmp_path, monkeypatch):
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    from operate_support import fail_ingest_of

    from pipeline.defs.analysis import analyze_archive

    archive, reports = tmp_path / "archive", tmp_path / "reports"
    archive.mkdir()
    for run_id in RUNS:
        shutil.copy(SHARED / "real-logs" / f"{run_id}.log", archive / f"{run_id}.log")
    fail_ingest_of(monkeypatch, RUNS[1])
    outcome = analyze_archive(archive, tmp_path / "warehouse", reports)
    assert list(outcome.not_analysed) == [RUNS[1]]
    assert outcome.not_analysed[RUNS[1]][0].startswith("could not be analysed: ingest failed: OSError")
    assert (reports / "runs" / f"{RUNS[0]}.html").is_file() and (reports / "runs" / f"{RUNS[2]}.html").is_file()
    fleet = outcome.fleet_report.read_text()
    assert 'id="not-analysed"' in fleet and "No space left on device" in fleet


def test_the_only_run_whose_summary_fails_leaves_the_fleet_tables_and_report(tmp_path, monkeypatch):
    """A run whose run_summary could not be derived, alone in its warehouse (its first `analyze --run`), still
    gets every fleet table: its stand-in summary row has run_summary's columns, which the fleet SQL binds."""
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    import pyarrow.parquet as pq

    from pipeline import derive, tables
    from pipeline.defs.analysis import analyze_archive

    archive, warehouse = tmp_path / "archive", tmp_path / "warehouse"
    archive.mkdir()
    run_id = RUNS[0]
    shutil.copy(SHARED / "real-logs" / f"{run_id}.log", archive / f"{run_id}.log")
    real_write = derive._write_query

    def summary_fails(con, name, params, run_ids, staging):
        if name == "run_summary":
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block")
        return real_write(con, name, params, run_ids, staging)

    monkeypatch.setattr(derive, "_write_query", summary_fails)
    outcome = analyze_archive(archive, warehouse, tmp_path / "reports")
    assert outcome.not_analysed == {run_id: [
        "could not be analysed: run_summary failed: OutOfMemoryException: Out of Memory Error: failed to pin block"]}
    columns = pq.read_schema(next((warehouse / "run_summary" / f"run_id={run_id}").glob("*.parquet"))).names
    assert {"root_cause_file", "root_cause_line_no", "last_checkpoint_step", "analysis_error"} <= set(columns)
    for table in tables.sql_tables(per_run=False):
        assert (warehouse / f"{table}.parquet").is_file(), table
    assert outcome.fleet_report is not None and run_id in outcome.fleet_report.read_text()


def test_the_only_run_whose_ingest_fails_is_reported_and_breaks_no_table(tmp_path, monkeypatch):
    """Alone in its warehouse, a run ingest could not read gets a `runs` row of ingest's columns: every derived
    table binds on it (no second problem), and the fleet report lists it as not analysed."""
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    from operate_support import fail_ingest_of

    from pipeline.defs.analysis import analyze_archive

    archive = tmp_path / "archive"
    archive.mkdir()
    run_id = RUNS[0]
    shutil.copy(SHARED / "real-logs" / f"{run_id}.log", archive / f"{run_id}.log")
    fail_ingest_of(monkeypatch, run_id)
    outcome = analyze_archive(archive, tmp_path / "warehouse", tmp_path / "reports")
    assert list(outcome.not_analysed) == [run_id]
    assert len(outcome.not_analysed[run_id]) == 1
    assert outcome.not_analysed[run_id][0].startswith("could not be analysed: ingest failed: OSError")
    fleet = outcome.fleet_report.read_text()
    assert 'id="not-analysed"' in fleet and "No space left on device" in fleet
