"""Lines that used to warp the reports: a 3 MB error line (ingest keeps a line's first MiB) was embedded whole in
the run report, and a run whose host clock ran years ahead vanished from the fleet report without a word."""

from __future__ import annotations

import datetime as dt

import duckdb

from pipeline.defs.analysis import analyze_archive
from pipeline.ingest import IngestLimits

STEPS = "".join(f"step:{s} - actor/entropy:0.{s} - timing_s/gen:1{s}.0 - timing_s/step:2{s}.0\n" for s in range(1, 4))
LONG = "ValueError: " + "x" * 3_000_000


def test_a_long_error_line_is_cut_and_a_future_dated_run_stays_in_the_fleet_report(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "long-line.log").write_text(
        STEPS + 'Traceback (most recent call last):\n  File "train.py", line 1, in <module>\n' + LONG + "\n")
    (archive / "future-run.log").write_text(
        "".join(f"2031-01-01 10:0{s}:00 INFO {line}\n" for s, line in enumerate(STEPS.splitlines(), start=1)))
    today = dt.date.today()
    outcome = analyze_archive(archive, tmp_path / "wh", tmp_path / "reports", day=today)
    assert sorted(outcome.run_ids) == ["future-run", "long-line"]

    page = (tmp_path / "reports" / "runs" / "long-line.html").read_text()
    assert len(page) < 1_000_000
    kept = min(len(LONG), IngestLimits().max_line_bytes)  # the line as log_lines keeps it
    assert f"{LONG[:4000]} … (cut: {kept:,} characters)" in page
    assert "x" * 4001 not in page

    problems = duckdb.connect().execute(
        "select problems from read_parquet($f)",
        {"f": str(tmp_path / "wh" / "runs" / "run_id=future-run" / "*.parquet")}).fetchone()[0]
    assert any(p.startswith("log times run to 2031-01-01 10:03, over a day after the file's last change")
               for p in problems)
    fleet = (tmp_path / "reports" / "fleet" / f"{today.isoformat()}.html").read_text()
    assert "future-run" in fleet and "long-line" in fleet
