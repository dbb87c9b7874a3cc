"""Benchmark the reports: the run report of a 20,000-step run and the fleet report of 1,000 runs.

Tables are fabricated (tests/report_fixtures.py) in a temporary warehouse; prints times and file sizes.
Usage: python benchmarks/bench_report.py [--steps 20000] [--runs 1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from report_fixtures import FAILURE_CLASSES, RunSpec, write_run  # noqa: E402

from pipeline.derive import derive_fleet_tables  # noqa: E402
from pipeline.report import build_fleet_mail, render_fleet_report, render_run_report  # noqa: E402

DAY = date(2026, 11, 28)
ANOMALY_CLASSES = ("gen_slowdown", "kl_spike", "grad_explosion", "update_actor_slowdown")
FLEET_TABLES = ("runs", "run_summary", "step_anomalies", "step_phases")


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    return result, elapsed


def long_run(warehouse: Path, steps: int) -> RunSpec:
    """A run of `steps` steps that ends in a CUDA OOM, with an anomaly episode every ~400 steps."""
    rng = random.Random(1)
    episodes = []
    s = 300
    while s < steps - 20:
        length = rng.randint(1, 12)
        episodes.append((s, s + length, rng.choice(ANOMALY_CLASSES)))
        s += rng.randint(250, 550)
    spec = RunSpec(
        run_id="long-run",
        failure_class="cuda_oom",
        n_steps=steps,
        expected_steps=steps + 500,
        episodes=episodes,
        step_s=40,
        seed=3,
    )
    write_run(warehouse, spec)
    return spec


def fleet(warehouse: Path, runs: int) -> None:
    """`runs` short runs over eight weeks, several experiments and config groups, with the fleet tables
    derived from them as the pipeline does."""
    rng = random.Random(2)
    weights = [60, 5, 8, 5, 4, 4, 3, 5, 3, 3]
    models = [
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-3B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "deepseek/ds-7b",
    ]
    for i in range(runs):
        cls = rng.choices(FAILURE_CLASSES, weights=weights)[0]
        n = rng.randint(20, 60)
        episodes = []
        if rng.random() < 0.2:
            first = rng.randint(2, n - 5)
            episodes.append((first, first + rng.randint(0, 3), rng.choice(ANOMALY_CLASSES)))
        spec = RunSpec(
            run_id=f"run-{i:05d}",
            failure_class=cls,
            n_steps=n,
            episodes=episodes,
            experiment=f"exp-{i % 40:02d}",
            ended_at=datetime(2026, 11, 28, 18) - timedelta(hours=rng.uniform(0, 24 * 56)),
            step_s=rng.uniform(20, 60),
            seed=i,
            with_logs=False,
            model_path=models[i % len(models)],
            n_gpus_per_node=rng.choice((4, 8)),
        )
        write_run(warehouse, spec, only=FLEET_TABLES)
    derive_fleet_tables(warehouse)


def main() -> None:
    """Parse the arguments and run the benchmark in a temporary folder (or --keep)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument(
        "--keep", type=Path, help="write warehouses and reports here instead of a temp folder"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        run_benchmark(args, args.keep or Path(tmp))


def run_benchmark(args: argparse.Namespace, root: Path) -> None:
    """Render both reports and the mail in `root`, printing times and sizes."""
    reports = root / "reports"

    _, t_build = _timed(lambda: long_run(root / "wh_long", args.steps))
    path, t_run = _timed(lambda: render_run_report(root / "wh_long", "long-run", reports))
    _, t_run2 = _timed(lambda: render_run_report(root / "wh_long", "long-run", reports))
    print(
        f"run report   {args.steps:>6} steps: build tables {t_build:6.2f} s, render {t_run:6.2f} s "
        f"(again {t_run2:5.2f} s), {path.stat().st_size / 1024:7.1f} KiB  {path}"
    )

    _, t_build = _timed(lambda: fleet(root / "wh_fleet", args.runs))
    path, t_fleet = _timed(lambda: render_fleet_report(root / "wh_fleet", reports, DAY))
    _, t_fleet2 = _timed(lambda: render_fleet_report(root / "wh_fleet", reports, DAY))
    print(
        f"fleet report {args.runs:>6} runs:  build tables {t_build:6.2f} s, render {t_fleet:6.2f} s "
        f"(again {t_fleet2:5.2f} s), {path.stat().st_size / 1024:7.1f} KiB  {path}"
    )

    message, t_mail = _timed(
        lambda: build_fleet_mail(
            path, sender="bench@example.org", recipients=["team@example.org"], subject="bench"
        )
    )
    print(f"fleet mail:  build {t_mail:5.2f} s, {len(message.as_bytes()) / 1024:7.1f} KiB")


if __name__ == "__main__":
    main()
