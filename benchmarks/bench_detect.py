"""Detect-layer speed and accuracy: fit and score a simulated fleet of about a million steps.

    python benchmarks/bench_detect.py [--steps 1000000] [--runs 1000] [--warehouse]

Fits on one simulated fleet and scores another of the same size that the model never saw (another
seed). Prints the seconds for features, fitting (target: under 2 minutes), scoring (target: under 1
minute, also through the warehouse with --warehouse), and the accuracy of the scored fleet against its
ground truth.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.detect import AnomalyModelConfig, build_features, fit_model, score_frame  # noqa: E402
from pipeline.detect.evaluate import score_predictions, simulated_traces, trace_frames  # noqa: E402


def fleet_frames(steps: int, runs: int, seed: int):
    """step_phases/step_health frames and labels of a simulated fleet of about `steps` steps."""
    scale = steps / (runs * 76.0)  # the simulated runs average about 76 logged steps at scale 1
    phases, health, labels = trace_frames(simulated_traces(seed, runs, steps_scale=scale))
    return phases, health, labels


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

    t = time.perf_counter()
    phases, health, labels = fleet_frames(args.steps, args.runs, args.seed)
    print(
        f"simulated {len(phases):,} steps of {phases['run_id'].nunique()} runs in {time.perf_counter() - t:.1f}s"
    )

    t = time.perf_counter()
    features = build_features(phases, health)
    t_feat = time.perf_counter() - t
    t = time.perf_counter()
    model = fit_model(features, AnomalyModelConfig())
    t_fit = time.perf_counter() - t
    print(f"fit: features {t_feat:.1f}s + forest {t_fit:.1f}s = {t_feat + t_fit:.1f}s (target < 120s)")

    t = time.perf_counter()
    phases, health, labels = fleet_frames(args.steps, args.runs, args.score_seed)
    print(f"unseen fleet: {len(phases):,} steps (seed {args.score_seed}) in {time.perf_counter() - t:.1f}s")

    t = time.perf_counter()
    result = score_frame(phases, health, model)
    t_score = time.perf_counter() - t
    print(
        f"score_frame: {len(result):,} steps in {t_score:.1f}s (target < 60s), "
        f"{int(result['is_anomaly'].sum()):,} flagged"
    )

    sc = score_predictions("detector", result, labels)
    print(
        f"accuracy: precision {sc.precision:.3f} recall {sc.recall:.3f} F1 {sc.f1:.3f} "
        f"episode recall {sc.episode_recall:.3f} false alarms/1000 {sc.false_alarms_per_1000:.2f} "
        f"class accuracy {sc.class_accuracy:.3f}"
    )

    if args.warehouse:
        import joblib

        from pipeline.detect import score_runs
        from pipeline.detect.model import model_paths
        from pipeline.lake import write_run_table

        with tempfile.TemporaryDirectory() as tmp:
            for table, frame in (("step_phases", phases), ("step_health", health)):
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
            t = time.perf_counter()
            flagged = score_runs(tmp, list(labels))
            print(f"score_runs through the warehouse: {time.perf_counter() - t:.1f}s, {flagged:,} flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
