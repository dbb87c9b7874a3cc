"""`dagster job launch -j run_health_job` end to end, as a training launcher calls it when a run ends."""

import json
import os
import subprocess
import time

from dagster import AssetKey, DagsterInstance, DagsterRunStatus
from operate_support import ROOT, VENV_BIN, simulate

DAGSTER_YAML = """\
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
"""


def _env(tmp_path, home):
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home),
        VERL_HEALTH_ARCHIVE=str(tmp_path / "sim" / "archive"),
        VERL_HEALTH_WAREHOUSE=str(tmp_path / "warehouse"),
        VERL_HEALTH_REPORTS=str(tmp_path / "reports"),
        VERL_HEALTH_QUIET_PERIOD_S="0",
        PYTHONPATH=str(ROOT),
    )
    return env


def _wait_for_run(home, timeout_s=240):
    """The launched run once it has finished (the launch command returns before the run ends)."""
    deadline = time.monotonic() + timeout_s
    with DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            runs = instance.get_runs()
            if runs and runs[0].is_finished:
                run = runs[0]
                report = instance.get_latest_materialization_event(AssetKey("run_report"))
                return run, report
            time.sleep(1)
    raise AssertionError(f"no finished run after {timeout_s} s")


def test_job_launch_writes_the_run_report(tmp_path):
    labels = simulate(tmp_path / "sim", runs=2, seed=5)
    run_id = sorted(labels["runs"])[0]
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    config = {"ops": {"analyze_finished_run": {"config": {"run": run_id}}}}
    proc = subprocess.run(
        [str(VENV_BIN / "dagster"), "job", "launch", "-j", "run_health_job", "-w", "workspace.yaml",
         "--config-json", json.dumps(config)],
        cwd=ROOT, env=_env(tmp_path, home), capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run, report = _wait_for_run(home)
    assert run.job_name == "run_health_job"
    assert run.status == DagsterRunStatus.SUCCESS, run.status
    assert (tmp_path / "reports" / "runs" / f"{run_id}.html").is_file()
    assert report is not None and report.dagster_event.partition == run_id
    assert (tmp_path / "warehouse" / "run_summary" / f"run_id={run_id}").is_dir()
