"""Shared fixtures: the real logs in ../shared, and simulated fleets analysed once per test session."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """`../shared` beside the clone; tests that need it skip where a user's clone has none."""
    if not (SHARED / "real-logs").is_dir():
        pytest.skip(f"{SHARED} is not beside this clone, so the real verl logs are not available")
    return SHARED


@pytest.fixture(scope="session")
def real_logs_dir(shared_dir: Path) -> Path:
    """The folder of real users' verl logs, one run per file."""
    return shared_dir / "real-logs"


@pytest.fixture(scope="session")
def sim_fleet(tmp_path_factory) -> SimpleNamespace:
    """A 40-run simulated fleet (archive + labels), written once per session."""
    from pipeline.simulate import simulate_fleet

    out = tmp_path_factory.mktemp("sim_fleet")
    labels = simulate_fleet(out, runs=40, seed=20261129)
    return SimpleNamespace(root=out, archive=out / "archive", labels=labels)


@pytest.fixture(scope="session")
def analyzed_fleet(sim_fleet, tmp_path_factory) -> SimpleNamespace:
    """The simulated fleet analysed end to end with `analyze_archive` (every asset, in-process)."""
    from pipeline.analysis import analyze_archive

    out = tmp_path_factory.mktemp("analyzed_fleet")
    outcome = analyze_archive(sim_fleet.archive, out / "warehouse", out / "reports")
    return SimpleNamespace(
        archive=sim_fleet.archive, labels=sim_fleet.labels, warehouse=out / "warehouse",
        reports=out / "reports", outcome=outcome,
    )


@pytest.fixture(scope="session")
def analyzed_real_logs(real_logs_dir, tmp_path_factory) -> SimpleNamespace:
    """The real logs analysed end to end, each file one run."""
    from pipeline.analysis import analyze_archive

    out = tmp_path_factory.mktemp("analyzed_real")
    outcome = analyze_archive(real_logs_dir, out / "warehouse", out / "reports")
    return SimpleNamespace(archive=real_logs_dir, warehouse=out / "warehouse", reports=out / "reports",
                           outcome=outcome)
