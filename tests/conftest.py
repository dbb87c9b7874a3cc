"""Shared fixtures and rules of the suite.

- The real logs in ../shared and simulated fleets, analysed once per test session: under pytest-xdist the
  workers share one copy (`built_once`), the first worker to need it builds it while the others wait.
- A local SMTP server that keeps what it receives.
- No test sees the developer's VERL_HEALTH_* settings.
- In CI (the `CI` variable set) nothing is skipped: a test that would skip (../shared or the browser
  missing, a module that does not import) fails with its reason instead.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
IN_CI = bool(os.environ.get("CI"))
SETTINGS_PREFIX = "VERL_HEALTH_"
# The day the session's fleet reports are for: fixed, so no test depends on the wall-clock date.
REPORT_DAY = date(2026, 11, 30)


def _developer_settings() -> list[str]:
    return [name for name in os.environ if name.startswith(SETTINGS_PREFIX)]


# Some settings are read when pipeline modules are imported (the nightly cron, the default
# Definitions), before any fixture runs: drop the developer's before the test modules import them.
for _name in _developer_settings():
    del os.environ[_name]


@pytest.fixture(autouse=True)
def no_developer_settings(monkeypatch):
    """Each test starts without VERL_HEALTH_* variables, whatever ran before it."""
    for name in _developer_settings():
        monkeypatch.delenv(name)


def _fail_skips_in_ci(report):
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"CI runs every test, but this one skipped: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI a skipped test is reported as failed, with the reason it gave."""
    return _fail_skips_in_ci((yield))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """In CI a module skipped at collection is reported as an error, with the reason it gave."""
    return _fail_skips_in_ci((yield))


def pytest_report_header(config):
    """Say up front whether the shared material is there and whether skips count as failures."""
    found = "found" if (SHARED / "real-logs").is_dir() else "MISSING"
    return f"shared material {SHARED}: {found}; CI={'yes: skips fail' if IN_CI else 'no'}"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """`../shared` beside the clone: skipped where a user's clone has none, a failure in CI."""
    if not (SHARED / "real-logs").is_dir():
        pytest.skip(f"{SHARED / 'real-logs'} is missing: the real verl logs, their labels and the shared "
                    f"tools must sit in {SHARED}, beside this clone")
    return SHARED


@pytest.fixture(scope="session")
def real_logs_dir(shared_dir: Path) -> Path:
    """The folder of real users' verl logs, one run per file."""
    return shared_dir / "real-logs"


def built_once(tmp_path_factory, name: str, build: Callable[[Path], object]):
    """What `build(folder)` returns, built once for the whole test session into a folder of its own: every
    pytest-xdist worker of the session shares it (their base temps sit in one session folder), the first to
    take its lock builds it and the others read the pickled result. A build that fails is tried again by the
    next worker that needs it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, result = root / name, root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if not result.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            result.write_bytes(pickle.dumps(build(folder)))
        return pickle.loads(result.read_bytes())


@pytest.fixture(scope="session")
def sim_fleet(tmp_path_factory) -> SimpleNamespace:
    """A 40-run simulated fleet (archive + labels), written once per session."""
    from lab.simulate import simulate_fleet

    def build(out: Path) -> SimpleNamespace:
        labels = simulate_fleet(out, runs=40, seed=20261129)
        return SimpleNamespace(root=out, archive=out / "archive", labels=labels)

    return built_once(tmp_path_factory, "sim_fleet", build)


@pytest.fixture(scope="session")
def analyzed_fleet(sim_fleet, tmp_path_factory) -> SimpleNamespace:
    """The simulated fleet analysed end to end with `analyze_archive` (every asset, in-process)."""
    from pipeline.defs.analysis import analyze_archive

    def build(out: Path) -> SimpleNamespace:
        outcome = analyze_archive(sim_fleet.archive, out / "warehouse", out / "reports", day=REPORT_DAY)
        return SimpleNamespace(archive=sim_fleet.archive, labels=sim_fleet.labels, warehouse=out / "warehouse",
                               reports=out / "reports", outcome=outcome)

    return built_once(tmp_path_factory, "analyzed_fleet", build)


@pytest.fixture(scope="session")
def analyzed_real_logs(real_logs_dir, tmp_path_factory) -> SimpleNamespace:
    """The real logs (the `*.log` files, copied into an archive of their own) analysed end to end,
    each file one run; every test that needs them ingested reads this one warehouse."""
    from pipeline.defs.analysis import analyze_archive

    def build(out: Path) -> SimpleNamespace:
        archive = out / "archive"
        archive.mkdir()
        for log in sorted(real_logs_dir.glob("*.log")):
            shutil.copy2(log, archive / log.name)
        outcome = analyze_archive(archive, out / "warehouse", out / "reports", day=REPORT_DAY)
        return SimpleNamespace(archive=archive, warehouse=out / "warehouse", reports=out / "reports",
                               outcome=outcome)

    return built_once(tmp_path_factory, "analyzed_real", build)


@pytest.fixture
def smtp_server():
    """A plain SMTP server on 127.0.0.1 (no TLS, no login): (port, inbox)."""
    from aiosmtpd.controller import Controller
    from mail_support import Inbox
    from operate_support import free_port

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller.port, inbox
    finally:
        controller.stop()
