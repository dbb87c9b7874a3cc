"""Benchmark the whole pipeline under Dagster: a simulated fleet with the multiprocess executor, in parallel.

1. Simulates a fleet (default 1,000 runs).
2. Parallel: per-run assets in `--chunks` Dagster runs at once (one partition range each, multiprocess
   executor, single-run backfill policy), then the fleet tables and the model, then scores and reports
   in chunks again, then the fleet report. Wall time of each phase.
3. The sum of single-run times: each run's per-run assets materialised alone (one partition, one
   Dagster run in-process), for every run or a `--sample` of them (then scaled to the fleet).
4. A night with nothing changed: the sensor tick, the nightly job, and `verl-health analyze` run again.

Usage: python benchmarks/bench_pipeline.py [--runs 1000] [--chunks 2] [--sample 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dagster import (  # noqa: E402
    AssetKey,
    DagsterInstance,
    SkipReason,
    build_sensor_context,
    execute_job,
    materialize,
)

from lab.simulate import simulate_fleet  # noqa: E402
from pipeline import tables  # noqa: E402
from pipeline.defs.analysis import analyze_archive  # noqa: E402
from pipeline.defs.assets import NIGHTLY_ASSETS  # noqa: E402
from pipeline.defs.definitions import build_definitions, reconstructable_job  # noqa: E402
from pipeline.defs.executors import resources_run_config  # noqa: E402
from pipeline.defs.partitions import RUN_PARTITIONS_NAME, partition_tags  # noqa: E402
from pipeline.defs.sensors import archive_cursor, finished_run_sensor  # noqa: E402

# the stages timed apart: the tables built before the anomaly model is fitted, then the fit, then those that read it
INGEST_DERIVE = [t for t in tables.per_run_tables() if not tables.needs_model(t)]
FLEET_BEFORE_MODEL = [t for t in tables.fleet_tables() if not tables.needs_model(t)]
SCORE_REPORT = ["step_anomalies", "run_report"]


def _timed(fn, label: str = ""):
    start = time.perf_counter()
    result = fn()
    took = time.perf_counter() - start
    if label:
        print(f"[bench] {label}: {took:.2f} s", file=sys.stderr, flush=True)
    return result, took


def _chunks(items: list[str], n: int) -> list[list[str]]:
    size = -(-len(items) // n)
    return [items[i : i + size] for i in range(0, len(items), size)]


def _run_chunks(instance, run_config, run_ids, selection, n_chunks) -> None:
    """One multiprocess Dagster run per contiguous partition range, all at once."""
    job = reconstructable_job("analyze_batch")

    def launch(chunk):
        tags = partition_tags(chunk)
        with execute_job(
            job, instance, run_config=run_config, tags=tags, asset_selection=[AssetKey(a) for a in selection]
        ) as result:
            if not result.success:
                raise RuntimeError(f"chunk {chunk[0]}..{chunk[-1]} failed")

    with ThreadPoolExecutor(n_chunks) as pool:
        list(pool.map(launch, _chunks(run_ids, n_chunks)))


def _unpartitioned(instance, run_config, selection) -> None:
    job = reconstructable_job("analyze_batch")
    with execute_job(
        job, instance, run_config=run_config, asset_selection=[AssetKey(a) for a in selection]
    ) as r:
        if not r.success:
            raise RuntimeError(f"{selection} failed")


def executor_config(start_method: str, max_concurrent: int) -> dict:
    """Multiprocess executor run config; forkserver imports the code once and forks each step from it."""
    method = {"forkserver": {"preload_modules": ["pipeline.defs.definitions"]}} if start_method == "forkserver" else {
        "spawn": {}}
    return {"execution": {"config": {"multiprocess": {"max_concurrent": max_concurrent, "start_method": method}}}}


def bench(root: Path, runs: int, seed: int, n_chunks: int, sample: int, steps_scale: float = 1.0,
          start_method: str = "forkserver", reports: bool = True) -> dict:
    """Run every measurement under `root` and return the numbers."""
    out: dict = {"runs": runs, "steps_scale": steps_scale, "chunks": n_chunks, "cpus": os.cpu_count(),
                 "load_before": os.getloadavg()[0]}
    labels, out["simulate_s"] = _timed(lambda: simulate_fleet(root, runs=runs, seed=seed, steps_scale=steps_scale),
                                       "simulate")
    score_report = SCORE_REPORT if reports else ["step_anomalies"]
    out["run_reports"] = reports
    archive, warehouse, reports_dir = root / "archive", root / "warehouse", root / "reports"
    out["archive_mb"] = round(sum(p.stat().st_size for p in archive.rglob("*") if p.is_file()) / 2**20, 1)
    run_ids = sorted(labels["runs"])
    run_config = {**resources_run_config(archive, warehouse, reports_dir, quiet_period_s=0),
                  **executor_config(start_method, os.cpu_count() or 2)}
    out["start_method"] = start_method
    (root / "dagster_home").mkdir(exist_ok=True)
    with DagsterInstance.local_temp(str(root / "dagster_home")) as instance:
        instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, run_ids)
        phases = {
            "ingest_derive": lambda: _run_chunks(instance, run_config, run_ids, INGEST_DERIVE, n_chunks),
            "fleet_and_model": lambda: _unpartitioned(
                instance, run_config, [*FLEET_BEFORE_MODEL, "anomaly_model"]
            ),
            "score_report": lambda: _run_chunks(instance, run_config, run_ids, score_report, n_chunks),
            "fleet_report": lambda: _unpartitioned(instance, run_config, ["fleet_report"]),
        }
        out["parallel_s"] = {name: round(_timed(fn, name)[1], 2) for name, fn in phases.items()}
    out["parallel_total_s"] = round(sum(out["parallel_s"].values()), 2)
    out["parallel_per_run_phases_s"] = round(
        out["parallel_s"]["ingest_derive"] + out["parallel_s"]["score_report"], 2
    )

    defs = build_definitions(archive, warehouse, reports_dir, quiet_period_s=0)
    picked = run_ids if sample >= len(run_ids) else sorted(random.Random(seed).sample(run_ids, sample))
    single = DagsterInstance.ephemeral()
    single.add_dynamic_partitions(RUN_PARTITIONS_NAME, picked)
    times = []
    for rid in picked:
        _, t = _timed(
            lambda rid=rid: materialize(
                list(defs.assets),
                instance=single,
                resources=defs.resources,
                selection=[*INGEST_DERIVE, *score_report],
                partition_key=rid,
            ),
            f"single run {rid}",
        )
        times.append(t)
    out["single_runs_measured"] = len(times)
    out["single_run_mean_s"] = round(sum(times) / len(times), 3)
    out["sum_single_runs_s"] = round(sum(times) * len(run_ids) / len(times), 1)
    out["speedup_vs_sum_single"] = round(out["sum_single_runs_s"] / out["parallel_per_run_phases_s"], 2)

    archive_res = defs.resources["archive"]
    cursor = archive_cursor(archive_res)
    tick, out["nightly_sensor_tick_s"] = _timed(
        lambda: finished_run_sensor(
            build_sensor_context(
                cursor=cursor, resources={"archive": archive_res}, instance=DagsterInstance.ephemeral()
            )
        ),
        "sensor tick",
    )
    out["nightly_sensor_requests"] = 0 if isinstance(tick, SkipReason) else len(tick.run_requests)
    _, out["nightly_job_s"] = _timed(
        lambda: materialize(list(defs.assets), resources=defs.resources, selection=NIGHTLY_ASSETS), "nightly job"
    )
    # Without run reports every run counts as not yet analysed, so this would redo the whole fleet.
    out["analyze_again_s"] = None
    if reports:
        _, out["analyze_again_s"] = _timed(lambda: analyze_archive(archive, warehouse, reports_dir), "analyze again")
    out["load_after"] = os.getloadavg()[0]
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its numbers."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--chunks", type=int, default=os.cpu_count() or 2, help="Dagster runs at once (default: cores)"
    )
    ap.add_argument(
        "--sample", type=int, default=100, help="runs timed alone (default 100; scaled to the fleet)"
    )
    ap.add_argument("--steps-scale", type=float, default=1.0, help="simulator run length factor (default 1)")
    ap.add_argument("--start-method", choices=["forkserver", "spawn"], default="forkserver",
                    help="how the multiprocess executor starts step processes (default forkserver)")
    ap.add_argument("--no-reports", action="store_true", help="leave run_report out of the per-run work")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = bench(args.keep, args.runs, args.seed, args.chunks, args.sample, args.steps_scale, args.start_method,
                           not args.no_reports)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = bench(Path(tmp), args.runs, args.seed, args.chunks, args.sample, args.steps_scale, args.start_method,
                           not args.no_reports)
    print(json.dumps(result, indent=2))
    print(
        f"\n{result['runs']} runs on {result['cpus']} cores, {result['chunks']} Dagster runs at once "
        f"(multiprocess executor):"
    )
    print(f"  per-run phases in parallel  {result['parallel_per_run_phases_s']:>9.1f} s")
    print(
        f"  sum of single-run times     {result['sum_single_runs_s']:>9.1f} s "
        f"({result['single_runs_measured']} measured, mean {result['single_run_mean_s']} s)"
    )
    print(f"  speed-up                    {result['speedup_vs_sum_single']:>9.2f} x")
    print(f"  whole fleet, all phases     {result['parallel_total_s']:>9.1f} s")
    print("a night with nothing changed:")
    print(
        f"  sensor tick                 {result['nightly_sensor_tick_s']:>9.2f} s "
        f"({result['nightly_sensor_requests']} run requests)"
    )
    print(f"  nightly job                 {result['nightly_job_s']:>9.2f} s")
    if result["analyze_again_s"] is not None:
        print(f"  verl-health analyze again   {result['analyze_again_s']:>9.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
