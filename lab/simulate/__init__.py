"""Fleet simulator: archives of verl runs in real log formats, with ground-truth labels.

`simulate_fleet` writes a fleet; `generate_run` gives one run's per-step metrics in memory;
`add_arguments`/`run_from_args` plug the simulator into the `verl-health` command line.
"""

from .cli import add_arguments, main, run_from_args
from .dynamics import RunTrace, generate_run
from .fleet import fleet_specs, make_spec, plan_fleet, simulate_fleet
from .spec import Episode, RunSpec, Segment
from .vocab import ANOMALY_CLASSES, FAILURE_CLASSES

__all__ = [
    "ANOMALY_CLASSES",
    "FAILURE_CLASSES",
    "Episode",
    "RunSpec",
    "RunTrace",
    "Segment",
    "add_arguments",
    "fleet_specs",
    "generate_run",
    "main",
    "make_spec",
    "plan_fleet",
    "run_from_args",
    "simulate_fleet",
]
