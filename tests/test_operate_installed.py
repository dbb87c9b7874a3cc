"""verl-health as an operator installs it: the wheel built from the checkout, in a clean virtual environment
with no dev extras (no access to the checkout's packages), loads its Dagster definitions and analyses a run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from operate_support import ROOT, write_run

# what the wheel is built from: the files a clone has (setup.py copies sql/ into the package)
SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "workspace.yaml", "pipeline", "sql", "deploy"]
INSTALL_TIMEOUT_S = 420


def _run(args: list, timeout: float = INSTALL_TIMEOUT_S, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(out: Path) -> Path:
    """The wheel of a copy of the checkout's tracked layout (no build/ left from an earlier build)."""
    src = out / "src"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out / "dist", src])
    [wheel] = (out / "dist").glob("verl_health-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(wheel, venv bin folder): the wheel installed with its base dependencies only."""
    out = tmp_path_factory.mktemp("install")
    wheel = build_wheel(out)
    venv = out / "venv"
    _run([sys.executable, "-m", "venv", venv])
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel])
    return wheel, venv / "bin"


def _clean_env(**extra) -> dict:
    """The environment of an operator's shell: no checkout on the path, no Dagster home of the tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DAGSTER_HOME", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_the_wheel_ships_every_sql_file_of_the_checkout(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as zf:
        shipped = {Path(n).name for n in zf.namelist() if n.startswith("pipeline/sql/") and n.endswith(".sql")}
    assert shipped == {p.name for p in (ROOT / "sql").glob("*.sql")}


def test_definitions_load_without_the_dask_extra(installed, tmp_path):
    _, bin_dir = installed
    probe = ("import json, warnings\n"
             "with warnings.catch_warnings(record=True) as caught:\n"
             "    warnings.simplefilter('always')\n"
             "    from pipeline.definitions import defs\n"
             "jobs = sorted(j.name for j in defs.get_repository_def().get_all_jobs() if not j.name.startswith('__'))\n"
             "print(json.dumps({'jobs': jobs, 'warnings': [str(w.message) for w in caught]}))\n")
    done = _run([bin_dir / "python", "-c", probe], timeout=120, cwd=tmp_path, env=_clean_env())
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["jobs"] == ["analyze_archive_job", "nightly_job", "run_assets_job", "run_health_job"]
    assert any("run_assets_dask_job" in w and "verl-health[dask]" in w for w in loaded["warnings"])


def test_the_installed_command_analyses_an_archive(installed, tmp_path):
    _, bin_dir = installed
    write_run(tmp_path / "archive", "grpo-a", steps=4)
    _run([bin_dir / "verl-health", "analyze", "archive", "--warehouse", "wh", "--reports", "reports"],
         timeout=180, cwd=tmp_path, env=_clean_env(DAGSTER_HOME=""))
    assert (tmp_path / "reports" / "runs" / "grpo-a.html").is_file()
    summary = pq.read_table(tmp_path / "wh" / "run_summary" / "run_id=grpo-a")
    assert summary.column("last_step").to_pylist() == [4]  # the log written above ends at step 4
