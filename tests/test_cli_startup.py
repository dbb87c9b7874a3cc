"""The first answer comes fast: `verl-health --help` and `analyze --help` import no heavy library."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("sklearn", "pandas", "dagster", "duckdb", "matplotlib", "lab.simulate", "pipeline.detect")
PROBE = """
import sys
from pipeline.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("IMPORTED:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def _imported(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv],
                         capture_output=True, text=True, check=True).stdout
    found = [line for line in out.splitlines() if line.startswith("IMPORTED:")][-1]
    return set(filter(None, found.removeprefix("IMPORTED:").split(",")))


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "--help"]])
def test_help_imports_no_heavy_library(argv):
    assert _imported(*argv) == set()


def test_subcommand_options_still_load_when_named():
    helps = {cmd: subprocess.run([sys.executable, "-m", "pipeline.cli", cmd, "--help"], capture_output=True,
                                 text=True, check=True).stdout for cmd in ("simulate", "evaluate")}
    assert "--seed" in helps["simulate"] and "--test-seeds" in helps["evaluate"]


def test_the_asset_graph_loads_no_forest_nor_plotting_library():
    """An unchanged run's `analyze --run` fits nothing and mails nothing: scikit-learn and matplotlib wait."""
    probe = "import sys, pipeline.defs.analysis; print([m for m in ('sklearn', 'matplotlib') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
