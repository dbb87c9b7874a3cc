"""Benchmark the derive layer: all per-run and fleet tables for a simulated fleet, next to its ingest time.

Simulates the fleet, ingests every run (timed), derives every table in one call each (timed), scores
run_summary against labels.json, and prints a side-by-side table.
Usage: python benchmarks/bench_derive.py [--runs 1000] [--seed 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import derive  # noqa: E402
from pipeline.ingest import discover_runs, ingest_run  # noqa: E402
from pipeline.lake import connect  # noqa: E402
from pipeline.simulate import simulate_fleet  # noqa: E402


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def bench(root: Path, runs: int, seed: int) -> dict:
    """Simulate, ingest and derive `runs` runs under `root`; return the timings and accuracy."""
    labels, t_sim = _timed(lambda: simulate_fleet(root, runs=runs, seed=seed))
    warehouse = root / "warehouse"
    found = discover_runs(root / "archive", quiet_period_s=0, now=time.time() + 10**7)

    def ingest_all():
        for entry in found.entries:
            ingest_run(entry, warehouse)

    _, t_ingest = _timed(ingest_all)
    run_ids = [e.run_id for e in found.entries]
    run_rows, t_run = _timed(lambda: derive.derive_run_tables(warehouse, run_ids))
    fleet_rows, t_fleet = _timed(lambda: derive.derive_fleet_tables(warehouse))
    con = connect(warehouse)
    pred = dict(con.execute("select run_id, failure_class from run_summary").fetchall())
    right = sum(pred.get(r) == lab["failure_class"] for r, lab in labels["runs"].items())
    lines, metrics = (
        con.execute(f"select count(*) from {t}").fetchone()[0] for t in ("log_lines", "step_metrics")
    )
    return {
        "runs": len(run_ids),
        "log_lines": lines,
        "step_metric_values": metrics,
        "simulate_s": t_sim,
        "ingest_s": t_ingest,
        "derive_run_tables_s": t_run,
        "derive_fleet_tables_s": t_fleet,
        "rows": {**run_rows, **fleet_rows},
        "failure_class_accuracy": right / max(len(labels["runs"]), 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the timings side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = ap.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = bench(args.keep, args.runs, args.seed)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_derive_") as tmp:
            result = bench(Path(tmp), args.runs, args.seed)
    derive_s = result["derive_run_tables_s"] + result["derive_fleet_tables_s"]
    print(
        f"fleet: {result['runs']} runs, {result['log_lines']:,} log lines, "
        f"{result['step_metric_values']:,} metric values"
    )
    print(f"{'stage':<28}{'seconds':>10}{'ms/run':>10}")
    for label, secs in (
        ("simulate", result["simulate_s"]),
        ("ingest", result["ingest_s"]),
        ("derive per-run tables", result["derive_run_tables_s"]),
        ("derive fleet tables", result["derive_fleet_tables_s"]),
        ("derive total", derive_s),
    ):
        print(f"{label:<28}{secs:>10.2f}{1000 * secs / max(result['runs'], 1):>10.1f}")
    print(f"derive / ingest time: {derive_s / result['ingest_s']:.2f}")
    print(f"failure_class accuracy vs labels.json: {result['failure_class_accuracy']:.4f}")
    print(json.dumps(result["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
