"""Many run reports at once: chart drawing is CPU-bound, so runs are spread over worker processes."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipeline.report.render import render_run_report

# Below this many runs, starting worker processes (each imports matplotlib) costs more than it saves.
MIN_RUNS_FOR_POOL = 8


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
