"""A second analysis of an unchanged archive skips every run; a changed run, a lost report or --force redo it."""

import gzip
import shutil
import time

from operate_support import simulate

from pipeline.incremental import split_changed


def _append_line(entry, line: str) -> None:
    """The run behind an archive entry writes one more line: to its log in a folder, or as one more gzip member
    of a .log.gz (gzip readers read concatenated members as one stream)."""
    if entry.is_dir():
        log = next(p for p in entry.rglob("*") if p.is_file() and p.suffix == ".log")
        with log.open("a") as f:
            f.write(line)
    elif entry.name.endswith(".log.gz"):
        with gzip.open(entry, "ab") as f:
            f.write(line.encode())
    else:
        raise AssertionError(f"no way to grow {entry.name} in place")


def test_unchanged_runs_are_skipped(tmp_path):
    from pipeline.defs.analysis import analyze_archive
    from pipeline.ingest import discover_runs

    labels = simulate(tmp_path / "sim", runs=2, seed=13)
    archive, warehouse, reports = tmp_path / "sim" / "archive", tmp_path / "warehouse", tmp_path / "reports"
    first = analyze_archive(archive, warehouse, reports)
    assert sorted(first.run_ids) == sorted(labels["runs"]) and first.unchanged == []

    again = analyze_archive(archive, warehouse, reports)
    assert again.run_ids == [] and again.unchanged == sorted(labels["runs"])
    assert again.fleet_report is not None

    grown, lost = sorted(labels["runs"])
    _append_line(archive / labels["runs"][grown]["entry"], "a line written after the first analysis\n")
    (reports / "runs" / f"{lost}.html").unlink()
    entries = discover_runs(archive, quiet_period_s=0, now=time.time() + 1).entries
    assert split_changed(entries, warehouse, reports) == (sorted([grown, lost]), [])

    third = analyze_archive(archive, warehouse, reports)
    assert sorted(third.run_ids) == sorted([grown, lost])
    assert (reports / "runs" / f"{lost}.html").is_file()

    # a run missing one per-run table (as when a table is added to the registry) is due again
    entries = discover_runs(archive, quiet_period_s=0, now=time.time() + 1).entries
    assert split_changed(entries, warehouse, reports) == ([], sorted(labels["runs"]))
    shutil.rmtree(warehouse / "config_findings" / f"run_id={lost}")
    assert split_changed(entries, warehouse, reports) == ([lost], [grown])


def test_new_runs_are_scored_with_the_stored_model(tmp_path):
    import json
    import shutil

    from pipeline.defs.analysis import analyze_archive
    from pipeline.lake import connect

    labels = simulate(tmp_path / "sim", runs=3, seed=17)
    archive, warehouse, reports = tmp_path / "archive", tmp_path / "warehouse", tmp_path / "reports"
    archive.mkdir()
    first, *later = sorted(labels["runs"].values(), key=lambda lab: lab["entry"])
    shutil.move(tmp_path / "sim" / "archive" / first["entry"], archive / first["entry"])
    analyze_archive(archive, warehouse, reports)
    meta_path = warehouse / "models" / "anomaly_model.json"
    fitted = json.loads(meta_path.read_text())
    assert fitted["training"]["n_runs"] == 1

    for lab in later:
        shutil.move(tmp_path / "sim" / "archive" / lab["entry"], archive / lab["entry"])
    second = analyze_archive(archive, warehouse, reports)
    assert len(second.run_ids) == 2
    assert json.loads(meta_path.read_text()) == fitted
    scored = connect(warehouse).execute("select count(distinct run_id) from step_anomalies").fetchone()[0]
    assert scored == 3

    forced = analyze_archive(archive, warehouse, reports, force=True, refit=True)
    assert sorted(forced.run_ids) == sorted(labels["runs"]), "--force redoes the unchanged runs"
    assert json.loads(meta_path.read_text())["training"]["n_runs"] == 3


def test_partition_ranges_never_span_a_run_left_out():
    from pipeline.defs.partitions import contiguous_ranges

    assert contiguous_ranges(["a", "b", "c", "d", "e"], {"a", "b", "d"}) == [["a", "b"], ["d"]]
    assert contiguous_ranges(["a", "b"], set()) == []


def test_refit_alone_refits_an_unchanged_archive(tmp_path):
    import json

    from pipeline.defs.analysis import analyze_archive

    simulate(tmp_path / "sim", runs=2, seed=19)
    archive, warehouse, reports = tmp_path / "sim" / "archive", tmp_path / "warehouse", tmp_path / "reports"
    analyze_archive(archive, warehouse, reports)
    meta_path = warehouse / "models" / "anomaly_model.json"
    fitted_at = json.loads(meta_path.read_text())["fitted_at_unix"]
    again = analyze_archive(archive, warehouse, reports, refit=True)
    assert again.run_ids == []
    assert json.loads(meta_path.read_text())["fitted_at_unix"] > fitted_at


def test_a_run_ingested_again_but_not_derived_is_redone(tmp_path):
    """A run whose log grew is ingested again, then the analysis stops (a kill) before its tables are derived:
    the next analysis must not call it unchanged, though every partition and its report exist."""
    import json
    import os

    import duckdb
    import pytest

    from pipeline.defs.analysis import analyze_archive
    from pipeline.ingest import discover_runs, ingest_run
    from tests.conftest import SHARED

    name = "16_opd_qwen_1_5b_normal_12steps_wandb_output"
    real = SHARED / "real-logs" / f"{name}.log"
    if not real.is_file():
        pytest.skip("../shared/real-logs is missing")
    label = next(json.loads(line) for line in (SHARED / "real-logs" / "LABELS.jsonl").read_text().splitlines()
                 if line.startswith(f'{{"file": "{name}.log"'))
    archive, warehouse, reports = tmp_path / "archive", tmp_path / "warehouse", tmp_path / "reports"
    archive.mkdir()
    log, whole = archive / f"{name}.log", real.read_bytes()
    log.write_bytes(whole[: len(whole) * 55 // 100])
    os.utime(log, (time.time() - 100, time.time() - 100))
    analyze_archive(archive, warehouse, reports)

    def last_step():
        con = duckdb.connect()
        try:
            return con.execute("select last_step from read_parquet($p)",
                               {"p": str(warehouse / "run_summary" / f"run_id={name}" / "*.parquet")}).fetchone()[0]
        finally:
            con.close()

    assert last_step() < label["last_step"]
    log.write_bytes(whole)
    entry = discover_runs(archive, quiet_period_s=0).entries[0]
    ingest_run(entry, warehouse)  # the new ingest; the analysis is killed before derive
    assert split_changed([entry], warehouse, reports) == ([name], [])
    again = analyze_archive(archive, warehouse, reports)
    assert again.run_ids == [name]
    assert last_step() == label["last_step"]
