"""The lab's sub-commands of `verl-health`: demo, simulate and evaluate.

pipeline/cli.py finds them through the `verl_health.commands` entry points (pyproject.toml), so the product
names nothing of the lab; each adds its parser, and imports the simulator or scikit-learn only when chosen."""

from __future__ import annotations

import argparse
from pathlib import Path

DEMO_RUNS = 24
DEMO_SEED = 7


def cmd_demo(args: argparse.Namespace) -> int:
    """Simulate a small fleet into ./data/archive, then analyse it into ./data/warehouse and ./reports."""
    from lab.simulate import simulate_fleet
    from pipeline.cli import Progress, print_outcome
    from pipeline.defs.analysis import analyze_archive
    from pipeline.defs.instance import persistent_instance

    data = Path(args.data)
    labels = simulate_fleet(data, runs=args.runs, seed=args.seed)
    print(f"simulated {len(labels['runs'])} runs into {data / 'archive'} (ground truth: {data / 'labels.json'})")
    outcome = analyze_archive(data / "archive", data / "warehouse", Path(args.reports), quiet_period_s=0,
                              instance=persistent_instance(data / "warehouse"), progress=Progress())
    print_outcome(outcome, Path(args.reports))
    print(f"warehouse:    {data / 'warehouse'} (duckdb {data / 'warehouse' / 'warehouse.duckdb'})")
    return 0


def add_demo(sub, chosen: bool) -> None:
    """`verl-health demo`: simulate a small fleet and analyse it."""
    demo = sub.add_parser("demo", help="simulate a small fleet and analyse it")
    demo.add_argument("--data", default="data", help="where the archive and warehouse go (default data)")
    demo.add_argument("--reports", default="reports", help="reports folder (default reports)")
    demo.add_argument("--runs", type=int, default=DEMO_RUNS)
    demo.add_argument("--seed", type=int, default=DEMO_SEED)
    demo.set_defaults(func=cmd_demo)


def add_simulate(sub, chosen: bool) -> None:
    """`verl-health simulate`: write a simulated fleet archive and its labels.json."""
    sim = sub.add_parser("simulate", help="write a simulated fleet archive and its labels.json")
    if chosen:
        from lab.simulate import add_arguments, run_from_args

        add_arguments(sim)
        sim.set_defaults(func=run_from_args)


def add_evaluate(sub, chosen: bool) -> None:
    """`verl-health evaluate`: score the anomaly detector on unseen simulated fleets."""
    ev = sub.add_parser("evaluate", help="score the anomaly detector on unseen simulated fleets")
    if chosen:
        from lab.evaluate import add_evaluate_arguments, run_evaluate

        add_evaluate_arguments(ev)
        ev.set_defaults(func=run_evaluate)
