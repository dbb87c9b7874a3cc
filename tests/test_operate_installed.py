"""verl-health as an operator installs and deploys it.

The wheel built from the checkout, in a clean virtual environment with no dev extras (no access to the checkout's
packages), loads its Dagster definitions and analyses a run. Then, with its `postgres` extra, the deployment of
docs/operations.md as real processes: a PostgreSQL server as the Dagster instance's storage, `dagster-daemon run`
and `dagster-webserver` on it; the sensor's run, the nightly schedule's run and a `dagster job launch` run go
through the daemon, and the web server's GraphQL API reports what they materialised."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from operate_support import ROOT, free_port, postgres_server, service, write_run

from pipeline.defs.assets.report import MAIL_TAG
from pipeline.defs.schedules import NIGHTLY_TAG

# what the wheel is built from: the files a clone has (setup.py copies sql/ into the package)
SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "workspace.yaml", "pipeline", "lab", "sql", "deploy"]
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
    # no byte-compiling of every installed module (40 s of the install here): the operator's processes below
    # write the bytecode of the modules they import (`_clean_env` lets them), about 5 s once
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile", wheel])
    return wheel, venv / "bin"


def _clean_env(**extra) -> dict:
    """The environment of an operator's shell: no checkout on the path, no Dagster home of the tests, Python's
    default of writing the bytecode of what it imports."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DAGSTER_HOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
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
             "    from pipeline.defs.definitions import defs\n"
             "jobs = sorted(j.name for j in defs.get_repository_def().get_all_jobs() if not j.name.startswith('__'))\n"
             "print(json.dumps({'jobs': jobs, 'warnings': [str(w.message) for w in caught]}))\n")
    done = _run([bin_dir / "python", "-c", probe], timeout=120, cwd=tmp_path, env=_clean_env())
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["jobs"] == ["analyze_archive_job", "analyze_batch", "run_health_job"]
    assert any("run_assets_dask_job" in w and "verl-health[dask]" in w for w in loaded["warnings"])


def test_the_installed_command_analyses_an_archive(installed, tmp_path):
    _, bin_dir = installed
    write_run(tmp_path / "archive", "grpo-a", steps=4)
    _run([bin_dir / "verl-health", "analyze", "archive", "--warehouse", "wh", "--reports", "reports"],
         timeout=180, cwd=tmp_path, env=_clean_env(DAGSTER_HOME=""))
    assert (tmp_path / "reports" / "runs" / "grpo-a.html").is_file()
    summary = pq.read_table(tmp_path / "wh" / "run_summary" / "run_id=grpo-a")
    assert summary.column("last_step").to_pylist() == [4]  # the log written above ends at step 4


# --- the deployment: PostgreSQL, the daemon and the web server as processes, on the installed wheel ---

RUN_ASSETS = ("runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
              "config_findings", "run_advice", "step_anomalies", "run_report")
DEPLOY_TIMEOUT_S = 300
GRAPHQL_RUNS = """{ runsOrError { ... on Runs { results { runId jobName status creationTime tags { key value } } } } }"""
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
GRAPHQL_ASSETS = """query ($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) {
  assetKey { path }
  partitionStats { numMaterialized numFailed }
  assetChecksOrError { ... on AssetChecks { checks { name } } }
} }"""
GRAPHQL_REPOSITORIES = """{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"""
# the UI's "Preview tick result" of a schedule and its "Launch all": the tick evaluated now, its run requests launched
GRAPHQL_SCHEDULE_JOB = """query ($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) { ... on Schedule { pipelineName } } }"""
GRAPHQL_SCHEDULE_TICK = """mutation ($selector: ScheduleSelector!, $timestamp: Float) {
  scheduleDryRun(selectorData: $selector, timestamp: $timestamp) {
    __typename
    ... on DryRunInstigationTick { evaluationResult {
      runRequests { jobName runConfigYaml tags { key value } assetSelection { path } } skipReason error { message } } }
    ... on PythonError { message } } }"""
GRAPHQL_LAUNCH_RUNS = """mutation ($params: [ExecutionParams!]!) { launchMultipleRuns(executionParamsList: $params) {
  __typename ... on LaunchMultipleRunsResult { launchMultipleRunsResult { __typename ... on PythonError { message } } } ... on PythonError { message } } }"""
GRAPHQL_CHECK_RUNS = """query ($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 50) { runId status } }"""


@pytest.fixture(scope="module")
def deployment(installed, tmp_path_factory):
    """An operator's deployment from docs/operations.md: the wheel with its `postgres` extra, an instance on a
    PostgreSQL server of its own (deploy/dagster-postgres.yaml), `dagster-daemon run` and `dagster-webserver`
    loading workspace.yaml from a folder that is not the checkout. Yields (env, folder, web server URL)."""
    wheel, bin_dir = installed
    _run([bin_dir / "python", "-m", "pip", "install", "-q", "--no-compile", f"{wheel}[postgres]"])
    folder = tmp_path_factory.mktemp("deployment")
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
    shutil.copy(ROOT / "workspace.yaml", folder / "workspace.yaml")
    port = free_port()
    with postgres_server() as pg_url:
        env = _clean_env(
            # the driver dagster-postgres installs (SQLAlchemy's default for postgresql:// is psycopg 3)
            DAGSTER_HOME=str(home), DAGSTER_PG_URL=pg_url.replace("postgresql://", "postgresql+psycopg2://"), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            VERL_HEALTH_ARCHIVE=str(folder / "archive"), VERL_HEALTH_WAREHOUSE=str(folder / "warehouse"),
            VERL_HEALTH_REPORTS=str(folder / "reports"),
            DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS="true",
        )
        url = f"http://127.0.0.1:{port}"
        with (
            service([bin_dir / "dagster-daemon", "run", "-w", "workspace.yaml"], folder / "daemon.log",
                    lambda: True, cwd=folder, env=env),
            service([bin_dir / "dagster-webserver", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", port],
                    folder / "webserver.log", lambda: _answers(f"{url}/server_info"), timeout_s=180, cwd=folder,
                    env=env),
        ):
            yield env, folder, url


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


def _graphql(url: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        answer = json.load(reply)
    assert "errors" not in answer, answer["errors"]
    return answer["data"]


def _dagster(env, folder, *args) -> str:
    return _run([Path(env["PATH"].split(os.pathsep)[0]) / "dagster", *args], timeout=180, cwd=folder, env=env).stdout


def _first_run(url: str, job: str, timeout_s: float = DEPLOY_TIMEOUT_S, tag: str | None = None) -> tuple[dict, int]:
    """The first run of `job` (carrying the tag `tag`, when given) once it has finished, and how many such runs
    there are (the web server's view)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = sorted((r for r in _graphql(url, GRAPHQL_RUNS)["runsOrError"]["results"]
                       if r["jobName"] == job and (tag is None or tag in _tags(r))),
                      key=lambda r: r["creationTime"])
        if runs and runs[0]["status"] in FINISHED:
            return runs[0], len(runs)
        time.sleep(2)
    raise AssertionError(f"no finished run of {job} after {timeout_s} s")


def _schedule_tick_now(url: str, schedule: str) -> list[dict]:
    """Evaluate `schedule`'s tick now and launch its run requests, as an operator does from the UI (a run the
    instance's queue hands to the daemon); the launch results."""
    [repo] = _graphql(url, GRAPHQL_REPOSITORIES)["repositoriesOrError"]["nodes"]
    location = {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"]}
    selector = {**location, "scheduleName": schedule}
    job = _graphql(url, GRAPHQL_SCHEDULE_JOB, {"selector": selector})["scheduleOrError"]["pipelineName"]
    tick = _graphql(url, GRAPHQL_SCHEDULE_TICK, {"selector": selector, "timestamp": time.time()})["scheduleDryRun"]
    assert tick["__typename"] == "DryRunInstigationTick", tick
    evaluation = tick["evaluationResult"]
    assert evaluation["error"] is None and evaluation["runRequests"], evaluation
    params = [{"selector": {**location, "jobName": request["jobName"] or job, "assetSelection": request["assetSelection"]},
               "runConfigData": request["runConfigYaml"], "mode": "default",
               "executionMetadata": {"tags": request["tags"]}} for request in evaluation["runRequests"]]
    launched = _graphql(url, GRAPHQL_LAUNCH_RUNS, {"params": params})["launchMultipleRuns"]
    assert launched["__typename"] == "LaunchMultipleRunsResult", launched
    return launched["launchMultipleRunsResult"]


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["tags"]}


def test_the_daemon_runs_the_sensor_the_schedule_and_a_launched_run(deployment):
    env, folder, url = deployment
    archive = folder / "archive"
    write_run(archive, "grpo-a", steps=4)
    write_run(archive, "grpo-b", steps=3)
    write_run(folder / "elsewhere", "grpo-c", steps=5)  # a run the training launcher names by its path

    # the training launcher's epilogue: `dagster job launch` of the per-run job, the daemon dequeues it
    config = {"ops": {"analyze_finished_run": {"config": {"run": str(folder / "elsewhere" / "grpo-c")}}}}
    _dagster(env, folder, "job", "launch", "-j", "run_health_job", "-w", "workspace.yaml",
             "--config-json", json.dumps(config))
    # the sensor's first tick sees the two finished runs and asks for one run over their range
    _dagster(env, folder, "sensor", "start", "finished_run_sensor", "-w", "workspace.yaml")

    sensor_run, sensor_runs = _first_run(url, "analyze_batch", tag="dagster/sensor_name")
    assert sensor_run["status"] == "SUCCESS", (folder / "daemon.log").read_text()[-3000:]
    assert sensor_runs == 1  # one run for the tick's two runs
    assert _tags(sensor_run)["verl-health/runs"] == "2"
    assert _tags(sensor_run)["dagster/sensor_name"] == "finished_run_sensor"
    launched, _ = _first_run(url, "run_health_job")
    assert launched["status"] == "SUCCESS", (folder / "daemon.log").read_text()[-3000:]
    reports = folder / "reports"
    assert sorted(p.stem for p in (reports / "runs").glob("*.html")) == ["grpo-a", "grpo-b", "grpo-c"]

    # the nightly schedule's tick requested now through the web server's API; the daemon's queue launches its run,
    # which refreshes the fleet report
    assert [r["__typename"] for r in _schedule_tick_now(url, "nightly_schedule")] == ["LaunchRunSuccess"]
    nightly, _ = _first_run(url, "analyze_batch", tag=NIGHTLY_TAG)
    assert nightly["status"] == "SUCCESS", (folder / "daemon.log").read_text()[-3000:]
    assert _tags(nightly)[MAIL_TAG] == "true"
    fleet = (reports / "fleet" / "latest.html").read_text()
    assert all(f'data-run-id="{rid}"' in fleet for rid in ("grpo-a", "grpo-b", "grpo-c"))

    # the web server reports the three runs' partitions materialised and every check of their assets passed
    keys = [{"path": [name]} for name in RUN_ASSETS]
    nodes = {n["assetKey"]["path"][0]: n for n in _graphql(url, GRAPHQL_ASSETS, {"keys": keys})["assetNodes"]}
    assert {name: (nodes[name]["partitionStats"]["numMaterialized"], nodes[name]["partitionStats"]["numFailed"])
            for name in RUN_ASSETS} == dict.fromkeys(RUN_ASSETS, (3, 0))
    checks = [(name, c["name"]) for name in RUN_ASSETS for c in nodes[name]["assetChecksOrError"]["checks"]]
    assert len(checks) >= len(RUN_ASSETS) - 1  # a contract check on every table (the report has none)
    for name, check in checks:
        done = _graphql(url, GRAPHQL_CHECK_RUNS, {"key": {"path": [name]}, "check": check})["assetCheckExecutions"]
        assert sensor_run["runId"] in {e["runId"] for e in done}, (name, check, done)
        assert {e["status"] for e in done} == {"SUCCEEDED"}, (name, check, done)
