"""A second analysis of an unchanged archive skips every run; a changed run, a lost report or --force redo it."""

import time

from operate_support import simulate

from pipeline.incremental import split_changed


def test_unchanged_runs_are_skipped(tmp_path):
    from pipeline.analysis import analyze_archive
    from pipeline.ingest import discover_runs

    labels = simulate(tmp_path / "sim", runs=2, seed=13)
    archive, warehouse, reports = tmp_path / "sim" / "archive", tmp_path / "warehouse", tmp_path / "reports"
    first = analyze_archive(archive, warehouse, reports)
    assert sorted(first.run_ids) == sorted(labels["runs"]) and first.unchanged == []

    again = analyze_archive(archive, warehouse, reports)
    assert again.run_ids == [] and again.unchanged == sorted(labels["runs"])
    assert again.fleet_report is not None

    grown, lost = sorted(labels["runs"])
    log = next(p for p in (archive / grown).rglob("*") if p.is_file() and p.suffix == ".log")
    with log.open("a") as f:
        f.write("a line written after the first analysis\n")
    (reports / "runs" / f"{lost}.html").unlink()
    entries = discover_runs(archive, quiet_period_s=0, now=time.time() + 1).entries
    assert split_changed(entries, warehouse, reports) == (sorted([grown, lost]), [])

    third = analyze_archive(archive, warehouse, reports)
    assert sorted(third.run_ids) == sorted([grown, lost])
    assert (reports / "runs" / f"{lost}.html").is_file()
    assert analyze_archive(archive, warehouse, reports, force=True).run_ids == sorted(labels["runs"])
