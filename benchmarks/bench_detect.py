"""Detect-layer speed and accuracy: fit and score a simulated fleet of about a million steps.

    python benchmarks/bench_detect.py [--steps 1000000] [--runs 1000] [--warehouse]
    python benchmarks/bench_detect.py --fleet WAREHOUSE [--against REV] [--repeat 3]

Fits on one simulated fleet and scores another of the same size that the model never saw (another
seed, with the anomaly kinds no rule names added). Both carry every key verl logs (step_metrics), which
the model reads. Prints the seconds for features, fitting (target: under 2 minutes), scoring (target:
under 1 minute, also through the warehouse with --warehouse), and the accuracy of the scored fleet
against its ground truth, the unnamed kinds (class other) included.

With --fleet, times what the anomaly_model and step_anomalies assets call on an analysed warehouse (a
copy of it each time): `fit_anomaly_model` on the fleet and `score_runs` of every run, reading and
writing included, side by side with the code of git revision REV (default HEAD), alternated, with
the ratio of CPU seconds and whether both wrote the same step_anomalies rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
# a --fleet worker runs against the tree it is given (another revision's export)
sys.path.insert(0, os.environ.get("BENCH_DETECT_TREE", str(ROOT)))

from lab.evaluate import simulated_fleet  # noqa: E402
from lab.scoring import score_predictions  # noqa: E402
from lab.simulate.unnamed import TUNED_KINDS, UNNAMED_KINDS  # noqa: E402
from pipeline.detect import AnomalyModelConfig, build_features, fit_model, score_frame  # noqa: E402


def fleet_frames(steps: int, runs: int, seed: int, kinds: tuple[str, ...]):
    """step_phases, step_health and step_metrics frames and labels of a simulated fleet of about `steps`
    steps, with unnamed episodes of `kinds`."""
    scale = steps / (runs * 76.0)  # the simulated runs average about 76 logged steps at scale 1
    return simulated_fleet(seed, runs, scale, kinds)


@contextmanager
def clock(times: dict, name: str):
    """Record wall and CPU seconds of the block under `name` (the CPU time says more on a shared machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    times[name] = (time.perf_counter() - wall, time.process_time() - cpu)


def _s(times: dict, name: str) -> str:
    wall, cpu = times[name]
    return f"{wall:.1f}s (cpu {cpu:.1f}s)"


def fleet_worker(source: str) -> dict:
    """Fit and score every run of a copy of the analysed warehouse `source` with the tree on sys.path:
    wall and CPU seconds of each, and a digest of the step_anomalies rows written (scores to 1e-9)."""
    import duckdb

    from pipeline.detect.warehouse import fit_anomaly_model, score_runs

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp) / "warehouse"
        shutil.copytree(source, warehouse)
        runs = sorted(p.name.split("=", 1)[1] for p in (warehouse / "runs").glob("run_id=*"))
        for name, step in (("fit", lambda: fit_anomaly_model(warehouse)), ("score", lambda: score_runs(warehouse, runs))):
            times: dict[str, tuple[float, float]] = {}
            with clock(times, name):
                step()
            out[name] = times[name]
        rows = duckdb.sql(
            f"select * replace (round(score, 9) as score) from read_parquet('{warehouse}/step_anomalies/*/*.parquet', "
            "hive_partitioning=true) order by run_id, step").fetchall()
    out["rows"] = len(rows)
    out["digest"] = hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
    return out


def _export(rev: str, into: Path) -> Path:
    """The pipeline and sql folders of git revision `rev`, exported into `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "pipeline", "sql"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def compare_fleet(source: str, against: str, repeat: int) -> int:
    """--fleet: REV's code and this tree's, alternated `repeat` times, each in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        trees = {against: str(_export(against, Path(tmp))), "this tree": str(ROOT)}
        results: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(repeat):
            for name, tree in trees.items():
                done = subprocess.run([sys.executable, __file__, "--fleet-worker", source], check=True, text=True,
                                      capture_output=True, env={**os.environ, "BENCH_DETECT_TREE": tree})
                results[name].append(json.loads(done.stdout.splitlines()[-1]))
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) after the runs; best CPU and median wall of {repeat}")
    best = {}
    for name, runs in results.items():
        best[name] = {k: min(r[k][1] for r in runs) for k in ("fit", "score")}
        walls = {k: sorted(r[k][0] for r in runs)[len(runs) // 2] for k in ("fit", "score")}
        digests = {r["digest"] for r in runs}
        print(f"{name:>10}: fit_anomaly_model cpu {best[name]['fit']:.2f}s (wall {walls['fit']:.2f}s), "
              f"score_runs cpu {best[name]['score']:.2f}s (wall {walls['score']:.2f}s); "
              f"{runs[0]['rows']} rows, digest {'/'.join(sorted(digests))}")
    base, ours = best[against], best["this tree"]
    print(f"CPU ratio {against} / this tree: fit {base['fit'] / ours['fit']:.2f}x, score {base['score'] / ours['score']:.2f}x")
    same = len({r["digest"] for runs in results.values() for r in runs}) == 1
    print("same step_anomalies rows" if same else "DIFFERENT step_anomalies rows")
    return 0 if same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", help="an analysed warehouse: time fit_anomaly_model and score_runs on copies of it")
    ap.add_argument("--against", default="HEAD", help="with --fleet: the git revision to compare with")
    ap.add_argument("--repeat", type=int, default=3, help="with --fleet: runs of each side")
    ap.add_argument("--fleet-worker", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=424242, help="seed of the fleet the model is fitted on")
    ap.add_argument("--score-seed", type=int, default=535353, help="seed of the unseen fleet that is scored")
    ap.add_argument(
        "--warehouse", action="store_true", help="also score through a warehouse (Parquet in, Parquet out)"
    )
    args = ap.parse_args(argv)
    if args.fleet_worker:
        print(json.dumps(fleet_worker(args.fleet_worker)))
        return 0
    if args.fleet:
        return compare_fleet(args.fleet, args.against, args.repeat)

    times: dict[str, tuple[float, float]] = {}
    with clock(times, "simulate"):
        phases, health, metrics, labels = fleet_frames(args.steps, args.runs, args.seed, TUNED_KINDS)
    print(f"simulated {len(phases):,} steps ({len(metrics):,} metric rows) of {phases['run_id'].nunique()} runs "
          f"in {_s(times, 'simulate')}")
    with clock(times, "features"):
        features = build_features(phases, health, metrics=metrics)
    with clock(times, "forest"):
        model = fit_model(features, AnomalyModelConfig())
    total = sum(times[k][0] for k in ("features", "forest"))
    print(f"fit: features {_s(times, 'features')} + forest {_s(times, 'forest')} = {total:.1f}s (target < 120s)")

    del features, metrics
    with clock(times, "simulate unseen"):
        phases, health, metrics, labels = fleet_frames(args.steps, args.runs, args.score_seed, tuple(UNNAMED_KINDS))
    print(f"unseen fleet: {len(phases):,} steps ({len(metrics):,} metric rows, seed {args.score_seed}) "
          f"in {_s(times, 'simulate unseen')}")
    with clock(times, "score"):
        result = score_frame(phases, health, model, metrics=metrics)
    print(f"score_frame: {len(result):,} steps in {_s(times, 'score')} (target < 60s), "
          f"{int(result['is_anomaly'].sum()):,} flagged")

    sc = score_predictions("detector", result, labels)
    print(
        f"accuracy: precision {sc.precision:.3f} recall {sc.recall:.3f} F1 {sc.f1:.3f} "
        f"episode recall {sc.episode_recall:.3f} false alarms/1000 {sc.false_alarms_per_1000:.2f} "
        f"class accuracy {sc.class_accuracy:.3f}"
    )
    hit, n, right = sc.by_class.get("other", [0, 0, 0])
    print(f"class other (kinds no rule names): {hit} of {n} episodes found, {right} named other")

    if args.warehouse:
        import joblib

        from pipeline.detect import score_runs
        from pipeline.detect.warehouse import model_paths
        from pipeline.lake import write_run_table

        with tempfile.TemporaryDirectory() as tmp:
            for table, frame in (("step_phases", phases), ("step_health", health), ("step_metrics", metrics)):
                for rid, part in frame.groupby("run_id", sort=False):
                    write_run_table(
                        tmp,
                        table,
                        rid,
                        pa.Table.from_pandas(part.drop(columns="run_id"), preserve_index=False),
                    )
            path, _ = model_paths(tmp)
            path.parent.mkdir(parents=True)
            joblib.dump(model, path)
            with clock(times, "score_runs"):
                flagged = score_runs(tmp, list(labels))
            print(f"score_runs through the warehouse: {_s(times, 'score_runs')}, {flagged:,} flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
