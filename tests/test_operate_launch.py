"""`dagster job launch -j run_health_job` end to end, as a training launcher calls it when a run ends."""

import json
import os
import subprocess
import time

from dagster import DagsterInstance, DagsterRunStatus
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
    """The launched run once it has finished (the launch command returns before the run ends), and every
    asset materialization its asset runs recorded in the instance, by asset name."""
    deadline = time.monotonic() + timeout_s
    with DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            launched = [r for r in instance.get_runs() if r.job_name == "run_health_job"]
            if launched and launched[0].is_finished:
                done = {}
                for key in instance.get_asset_keys():
                    event = instance.get_latest_materialization_event(key)
                    if event is not None:
                        done[key.to_user_string()] = event.dagster_event.partition
                return launched[0], done
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
    run, done = _wait_for_run(home)
    assert run.status == DagsterRunStatus.SUCCESS, run.status
    assert (tmp_path / "reports" / "runs" / f"{run_id}.html").is_file()
    # the run went through the asset graph: every per-run asset has this run's partition in the instance
    per_run = ("runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
               "config_findings", "run_advice", "step_anomalies", "run_report")
    assert {name: done.get(name) for name in per_run} == dict.fromkeys(per_run, run_id)
    assert (tmp_path / "warehouse" / "run_summary" / f"run_id={run_id}").is_dir()
