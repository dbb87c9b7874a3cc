"""Many run reports at once: in this process, or spread over worker processes for a large batch.

A short run's report costs about 70 ms of CPU (reading its tables, SVG charts, the template); a spawned
worker first spends seconds importing the pipeline, so processes pay off only for large batches
(benchmarks/RESULTS.md, "Report charts": 40 runs are faster in one process, 200 faster in two).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipeline.report.render import render_run_report

# Below this many runs, starting worker processes costs more than it saves (measured crossover ~120 runs).
MIN_RUNS_FOR_POOL = 120


def render_run_reports(
    warehouse: str | Path, run_ids: list[str], reports_dir: str | Path, workers: int | None = None
) -> list[Path]:
    """Render the report of every run in `run_ids`, in parallel when there are enough of them."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(run_ids) < MIN_RUNS_FOR_POOL:
        return [render_run_report(warehouse, rid, reports_dir) for rid in run_ids]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(render_run_report, warehouse, rid, reports_dir) for rid in run_ids]
        return [f.result() for f in futures]
