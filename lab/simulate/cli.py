"""`verl-health simulate OUT --runs N --seed S [--steps-scale X] [--chatter K]`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .fleet import simulate_fleet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulate command's arguments to `parser`."""
    parser.add_argument("out", type=Path, help="output folder: OUT/archive/ and OUT/labels.json")
    parser.add_argument("--runs", type=int, default=20, help="number of runs (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; same seed, same bytes (default 0)")
    parser.add_argument("--steps-scale", type=float, default=1.0,
                        help="multiply every run's length (0.1: a few steps; 100: tens of thousands)")
    parser.add_argument("--chatter", type=int, default=0,
                        help="extra worker-warning lines per step, to build very large logs (default 0)")


def run_from_args(args: argparse.Namespace) -> int:
    """Run the simulator for parsed arguments; print a one-line summary; return the exit code."""
    t0 = time.perf_counter()
    labels = simulate_fleet(args.out, args.runs, args.seed, args.steps_scale, chatter=args.chatter)
    classes = ", ".join(f"{k}={v}" for k, v in labels["failure_classes"].items() if v)
    print(f"simulated {len(labels['runs'])} runs into {args.out / 'archive'} in {time.perf_counter() - t0:.1f} s "
          f"({classes}); labels: {args.out / 'labels.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: `python -m lab.simulate OUT --runs N --seed S`."""
    parser = argparse.ArgumentParser(prog="verl-health simulate", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))
