"""Many run reports at once: in this process, or spread over worker processes for a large batch.

The runs' tables are read from the warehouse once per batch, in one statement per table for all its runs,
split per run in memory (`run_data.load_runs`); a report then costs its SVG charts and its template, about
30 ms of CPU in all on the 100-run simulated fleet. A spawned worker first spends about 1.5 CPU-s importing
the pipeline and opening DuckDB before its first report, so processes pay off only for large batches on
free cores: on the shared 2 cores one process was faster at 100 and at 200 runs (bench_report --parts batch).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipeline.report.render import write_run_report
from pipeline.report.run_data import load_runs

# Below this many runs, starting worker processes costs more than it saves: two workers' start (2 x 1.5 CPU-s)
# is the work of 100 reports, and one process was faster for 200 runs on the shared 2 cores.
MIN_RUNS_FOR_POOL = 300
# Runs whose tables one process holds in memory at once
MAX_BATCH = 100


def render_run_reports(
    warehouse: str | Path, run_ids: list[str], reports_dir: str | Path, workers: int | None = None
) -> list[Path]:
    """Render the report of every run in `run_ids`, in parallel when there are enough of them."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(run_ids) < MIN_RUNS_FOR_POOL:
        return [p for chunk in _chunks(run_ids, MAX_BATCH) for p in _render_batch(warehouse, chunk, reports_dir)]
    size = min(MAX_BATCH, -(-len(run_ids) // workers))
    chunks = _chunks(run_ids, size)
    ctx = multiprocessing.get_context("spawn")
    # this process renders every `workers`-th chunk while workers - 1 processes render the rest: one process
    # fewer to start (1.5 CPU-s) and to hold in memory beside this one, which the batch's run holds anyway
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
        theirs = {i: pool.submit(_render_batch, warehouse, c, reports_dir) for i, c in enumerate(chunks) if i % workers}
        mine = {i: _render_batch(warehouse, c, reports_dir) for i, c in enumerate(chunks) if not i % workers}
        return [p for i in range(len(chunks)) for p in (mine[i] if i in mine else theirs[i].result())]


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _render_batch(warehouse: str | Path, run_ids: list[str], reports_dir: str | Path) -> list[Path]:
    return [write_run_report(data, reports_dir) for data in load_runs(warehouse, run_ids)]
