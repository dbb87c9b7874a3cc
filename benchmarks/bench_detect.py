"""Detect-layer speed and accuracy: fit and score a simulated fleet of about a million steps.

    python benchmarks/bench_detect.py [--steps 1000000] [--runs 1000] [--warehouse]

Fits on one simulated fleet and scores another of the same size that the model never saw (another
seed, with the anomaly kinds no rule names added). Both carry every key verl logs (step_metrics), which
the model reads. Prints the seconds for features, fitting (target: under 2 minutes), scoring (target:
under 1 minute, also through the warehouse with --warehouse), and the accuracy of the scored fleet
against its ground truth, the unnamed kinds (class other) included.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.detect import AnomalyModelConfig, build_features, fit_model, score_frame  # noqa: E402
from pipeline.detect.evaluate import simulated_fleet  # noqa: E402
from pipeline.detect.scoring import score_predictions  # noqa: E402
from pipeline.simulate.unnamed import TUNED_KINDS, UNNAMED_KINDS  # noqa: E402


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=424242, help="seed of the fleet the model is fitted on")
    ap.add_argument("--score-seed", type=int, default=535353, help="seed of the unseen fleet that is scored")
    ap.add_argument(
        "--warehouse", action="store_true", help="also score through a warehouse (Parquet in, Parquet out)"
    )
    args = ap.parse_args(argv)

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
