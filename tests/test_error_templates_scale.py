"""error_templates stays within derive's memory cap when one template is printed by many runs."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from pipeline import derive, lake

RUNS, LINES = 2000, 50


def _events(run: int) -> pa.Table:
    """LINES lines of one warning (its numbers differ, so it is one template) in one run's driver log."""
    start = datetime(2026, 11, 1) + timedelta(minutes=run)
    return pa.table({
        "file": ["main.log"] * LINES,
        "line_no": list(range(1, LINES + 1)),
        "event_class": ["warning_other"] * LINES,
        "kind": ["warning"] * LINES,
        "component": [None] * LINES,
        "message": [f"WARNING grad buffer {i} of {run} resized to {i * 7} MB" for i in range(LINES)],
        "step": list(range(LINES)),
        "phase": [None] * LINES,
        "traceback_phase": [None] * LINES,
        "segment": pa.array([0] * LINES, pa.int32()),
        "ts": [start + timedelta(seconds=i) for i in range(LINES)],
        "order_ts": [start + timedelta(seconds=i) for i in range(LINES)],
    })


def test_one_template_in_every_run_of_a_big_fleet_is_one_row_with_every_run(tmp_path):
    """600 runs x 100 lines of one warning: one template listing each run once, derived under the 512 MB cap
    (a per-template list joined to each of the template's lines ran out of memory at this size)."""
    for run in range(RUNS):
        lake.write_run_table(tmp_path, "run_events", f"run-{run:04d}", _events(run))
        lake.write_run_table(tmp_path, "run_summary", f"run-{run:04d}", pa.table(
            {"root_cause_file": ["main.log"], "root_cause_line_no": pa.array([LINES], pa.int64())}))
    assert derive.derive_fleet_table(tmp_path, "error_templates") == 1
    con = lake.connect(tmp_path, only=["error_templates"])
    try:
        n_runs, n_lines, runs, by_run = con.execute(
            "select n_runs, n_lines, run_ids, lines_by_run from error_templates").fetchone()
    finally:
        con.close()
    assert (n_runs, n_lines) == (RUNS, RUNS * LINES)
    assert runs == [f"run-{run:04d}" for run in range(RUNS)]
    assert [(r["run_id"], r["n_lines"], r["first_line_no"]) for r in by_run] == [
        (f"run-{run:04d}", LINES, 1) for run in range(RUNS)]
