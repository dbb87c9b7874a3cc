"""Benchmark the reports: the run report of a 20,000-step run and the fleet report of 1,000 runs, what the
charts cost per run report against a baseline revision's charts (matplotlib PNGs before c7f7c09), and
batches of run reports in one process against worker processes.

Tables are fabricated (tests/report_fixtures.py) in a temporary warehouse; prints times and file sizes.
Usage: python benchmarks/bench_report.py [--steps 20000] [--runs 1000] [--chart-runs 40]
       [--batch-runs 40 200] [--parts charts batch reports] [--baseline-rev b3354dd] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from report_fixtures import FAILURE_CLASSES, RunSpec, write_run  # noqa: E402

from pipeline.derive import derive_fleet_tables  # noqa: E402
from pipeline.report import batch, build_fleet_mail, charts, render_fleet_report, render_run_report  # noqa: E402

DAY = date(2026, 11, 28)
ANOMALY_CLASSES = ("gen_slowdown", "kl_spike", "grad_explosion", "update_actor_slowdown")
FLEET_TABLES = ("runs", "run_summary", "step_anomalies", "step_phases")
RUN_CHARTS = ("phase_chart", "health_chart")
PARTS = ("charts", "batch", "reports")


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
    parser.add_argument("--chart-runs", type=int, default=40, help="short runs whose reports time the charts")
    parser.add_argument("--baseline-rev", default="b3354dd",
                        help="git revision whose pipeline/report/charts.py is the baseline (matplotlib)")
    parser.add_argument("--batch-runs", type=int, nargs="*", default=[40, 200],
                        help="batch sizes whose run reports are rendered in one process and in worker processes")
    parser.add_argument("--parts", nargs="*", choices=PARTS, default=list(PARTS), help="what to measure")
    parser.add_argument(
        "--keep", type=Path, help="write warehouses and reports here instead of a temp folder"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        run_benchmark(args, args.keep or Path(tmp))


def baseline_charts(rev: str):
    """The run-report chart functions of `pipeline/report/charts.py` at git revision `rev`."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:pipeline/report/charts.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"charts_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:pipeline/report/charts.py", "exec"), module.__dict__)  # noqa: S102
    return module


@contextlib.contextmanager
def timed_charts(impl, spent: list[float]):
    """Route the run report's chart calls to `impl`'s functions and add the CPU seconds spent in them to
    `spent` (CPU, not wall: the machine is shared, and the two versions are timed on the same load)."""
    saved = {name: getattr(charts, name) for name in RUN_CHARTS}

    def wrap(fn):
        def timed(*a, **k):
            start = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent.append(time.process_time() - start)
        return timed

    for name in RUN_CHARTS:
        setattr(charts, name, wrap(getattr(impl, name)))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(charts, name, fn)


def short_runs(warehouse: Path, n_runs: int, prefix: str) -> list[str]:
    """`n_runs` completed runs of 20-60 steps with one anomaly episode each; returns their ids."""
    rng = random.Random(5)
    ids = []
    for i in range(n_runs):
        n = rng.randint(20, 60)
        first = rng.randint(2, n - 6)
        write_run(warehouse, RunSpec(run_id=f"{prefix}-{i:03d}", failure_class="completed", n_steps=n,
                                     episodes=[(first, first + 3, rng.choice(ANOMALY_CLASSES))], seed=100 + i))
        ids.append(f"{prefix}-{i:03d}")
    return ids


def batch_costs(args: argparse.Namespace, root: Path) -> None:
    """Wall seconds to render the reports of many short runs with render_run_reports: in this process, and
    spread over its worker processes (one per core); the load average beside them (a shared machine)."""
    for n_runs in args.batch_runs:
        wh = root / f"wh_batch_{n_runs}"
        ids = short_runs(wh, n_runs, "batch")
        render_run_report(wh, ids[0], root / "warm")
        print(f"run reports of {n_runs} runs of 20-60 steps (wall), load average {os.getloadavg()[0]:.1f}:")
        for label, workers in (("one process", 1), (f"{os.cpu_count()} worker processes", None)):
            saved, batch.MIN_RUNS_FOR_POOL = batch.MIN_RUNS_FOR_POOL, 2  # the pool whatever the batch's size
            start = time.perf_counter()
            try:
                batch.render_run_reports(wh, ids, root / "reports_batch", workers=workers)
            finally:
                batch.MIN_RUNS_FOR_POOL = saved
            wall = time.perf_counter() - start
            print(f"  {label:<20} {wall:6.2f} s, {wall / n_runs * 1000:6.1f} ms per report"
                  f" (load average {os.getloadavg()[0]:.1f})")


def chart_costs(args: argparse.Namespace, root: Path) -> None:
    """Per run report of a short run (20-60 steps): the whole render and the charts' part, with the baseline
    revision's charts and with the current ones, on the same tables, alternating run by run."""
    wh = root / "wh_charts"
    ids = short_runs(wh, args.chart_runs, "chart")
    impls = {"baseline " + args.baseline_rev: baseline_charts(args.baseline_rev), "current": charts}
    whole = {label: 0.0 for label in impls}
    spent: dict[str, list[float]] = {label: [] for label in impls}
    for impl in impls.values():  # imports, fonts and template compilation, once each
        with timed_charts(impl, []):
            render_run_report(wh, ids[0], root / "warm")
    for rid in ids:
        for label, impl in impls.items():
            with timed_charts(impl, spent[label]):
                start = time.process_time()
                render_run_report(wh, rid, root / "reports_charts" / label.split()[0])
                whole[label] += time.process_time() - start
    _print_costs(f"{len(ids)} runs of 20-60 steps", len(ids), whole, spent)
    long_wh = root / "wh_long_charts"
    long_run(long_wh, args.steps)
    whole = {label: 0.0 for label in impls}
    spent = {label: [] for label in impls}
    for _ in range(3):
        for label, impl in impls.items():
            with timed_charts(impl, spent[label]):
                start = time.process_time()
                render_run_report(long_wh, "long-run", root / "reports_charts" / label.split()[0])
                whole[label] += time.process_time() - start
    _print_costs(f"one run of {args.steps} steps, 3 times", 3, whole, spent)


def _print_costs(what: str, n: int, whole: dict[str, float], spent: dict[str, list[float]]) -> None:
    print(f"run report charts, {what} (CPU per report):")
    for label in whole:
        print(f"  {label:<18} render {whole[label] / n * 1000:7.1f} ms, of which charts {sum(spent[label]) / n * 1000:7.1f} ms")
    (b_whole, c_whole), (b_chart, c_chart) = whole.values(), (sum(v) for v in spent.values())
    print(f"  speed-up: charts {b_chart / c_chart:5.1f}x, whole report {b_whole / c_whole:4.2f}x")


def run_benchmark(args: argparse.Namespace, root: Path) -> None:
    """Render both reports and the mail in `root`, printing times and sizes."""
    if "charts" in args.parts:
        chart_costs(args, root)
    if "batch" in args.parts:
        batch_costs(args, root)
    if "reports" in args.parts:
        whole_reports(args, root)


def whole_reports(args: argparse.Namespace, root: Path) -> None:
    """The run report of a long run and the fleet report of many runs, with the fleet mail."""
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
