"""The shipped deployment configs load: the instance yamls, the dask run configs, the Kubernetes manifests."""

import importlib
import re
import shutil
from pathlib import Path

import yaml
from dagster import DagsterInstance, Definitions, validate_run_config
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config_schema
from operate_support import ROOT

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
# settings that are secrets: they belong in the Kubernetes Secret, never in the ConfigMap
SECRETS = {"VERL_HEALTH_SMTP_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def test_instance_yaml_uses_the_queued_coordinator(tmp_path, monkeypatch):
    shutil.copy(DEPLOY / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with DagsterInstance.get() as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_coordinator.get_run_queue_config().max_concurrent_runs == 2


def test_postgres_instance_yaml_is_the_sqlite_one_on_postgres():
    """deploy/dagster-postgres.yaml is a valid instance whose storage is the Postgres URL in DAGSTER_PG_URL, and
    everything else as deploy/dagster.yaml says (the deployment test runs it on a real server)."""
    sqlite, postgres = (yaml.safe_load((DEPLOY / name).read_text()) for name in ("dagster.yaml", "dagster-postgres.yaml"))
    checked = validate_config(dagster_instance_config_schema(), postgres)
    assert checked.success, [e.message for e in checked.errors]
    assert postgres.pop("storage") == {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}}
    assert "sqlite" in sqlite.pop("storage")
    assert postgres == sqlite


def test_dask_run_configs_validate(monkeypatch):
    from pipeline.defs.definitions import defs

    job = defs.resolve_job_def("run_assets_dask_job")
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8786")
    for name in ("dask.yaml", "dask-local.yaml"):
        config = yaml.safe_load(Path(DEPLOY / name).read_text())
        assert validate_run_config(job, config), name


def test_the_batch_job_forks_its_steps_from_a_preloaded_server():
    """Runs that name no executor config (the sensor's, the schedule's, a launch for a partition) fork their steps
    from a forkserver that imported pipeline.defs.definitions, and that config validates for the job."""
    from pipeline.defs.definitions import defs
    from pipeline.defs.jobs import FORKED_STEPS

    forked = {"max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": ["pipeline.defs.definitions"]}}}
    assert {"execution": {"config": {"multiprocess": forked}}} == FORKED_STEPS
    job = defs.resolve_job_def("analyze_batch")
    assert job.partitioned_config.get_run_config_for_partition_key("grpo-a") == FORKED_STEPS
    assert validate_run_config(job, FORKED_STEPS)["execution"]["multi_or_in_process_executor"]["multiprocess"] == {
        **forked, "retries": {"enabled": {}}}


def _k8s(name: str) -> list[dict]:
    return list(yaml.safe_load_all((K8S / name).read_text()))


def _env_objects() -> tuple[dict, dict]:
    """The ConfigMap and the Secret of deploy/k8s/env.yaml."""
    by_kind = {doc["kind"]: doc for doc in _k8s("env.yaml")}
    assert set(by_kind) == {"ConfigMap", "Secret"}
    return by_kind["ConfigMap"], by_kind["Secret"]


def test_kubernetes_manifests_are_all_there():
    """The instance, its environment and the Helm values ship together."""
    assert sorted(p.name for p in K8S.iterdir()) == ["dagster.yaml", "env.yaml", "values.yaml"]


def test_kubernetes_instance_launches_runs_as_jobs_with_the_shipped_environment():
    """deploy/k8s/dagster.yaml is a valid Dagster instance that runs each run as a Kubernetes Job reading
    the ConfigMap and Secret of env.yaml, on the volume the Helm values mount."""
    [instance] = _k8s("dagster.yaml")
    checked = validate_config(dagster_instance_config_schema(), instance)
    assert checked.success, [e.message for e in checked.errors]
    launcher = instance["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    config_map, secret = _env_objects()
    assert launcher["config"]["env_config_maps"] == [config_map["metadata"]["name"]]
    assert launcher["config"]["env_secrets"] == [secret["metadata"]["name"]]
    [volume] = launcher["config"]["run_k8s_config"]["pod_spec_config"]["volumes"]
    [values] = _k8s("values.yaml")
    [helm_volume] = values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]["volumes"]
    assert volume["persistent_volume_claim"]["claim_name"] == helm_volume["persistentVolumeClaim"]["claimName"]


def test_kubernetes_environment_sets_what_the_code_reads():
    """Every VERL_HEALTH_* name in env.yaml is one the code reads (no typo), the folders and mail are set,
    and secrets sit only in the Secret."""
    config_map, secret = _env_objects()
    read = {m for p in (ROOT / "pipeline").rglob("*.py") for m in re.findall(r"VERL_HEALTH_[A-Z_]+", p.read_text())}
    plain, hidden = set(config_map["data"]), set(secret["stringData"])
    assert {n for n in plain | hidden if n.startswith("VERL_HEALTH_")} <= read
    assert {"VERL_HEALTH_ARCHIVE", "VERL_HEALTH_WAREHOUSE", "VERL_HEALTH_REPORTS", "VERL_HEALTH_SMTP_HOST",
            "VERL_HEALTH_MAIL_TO"} <= plain
    assert hidden >= SECRETS and not SECRETS & plain
    assert all(isinstance(v, str) for v in config_map["data"].values()), "ConfigMap values must be strings"


def test_helm_values_serve_this_code_location():
    """The Helm chart's user deployment loads pipeline.defs.definitions with env.yaml's objects, and its
    concurrency limit names a job that exists."""
    [values] = _k8s("values.yaml")
    [deployment] = values["dagster-user-deployments"]["deployments"]
    args = deployment["dagsterApiGrpcArgs"]
    module = importlib.import_module(args[args.index("--module-name") + 1])
    assert isinstance(module.defs, Definitions)
    config_map, secret = _env_objects()
    assert deployment["envConfigMaps"] == [{"name": config_map["metadata"]["name"]}]
    assert deployment["envSecrets"] == [{"name": secret["metadata"]["name"]}]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    limits = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    jobs = {j.name for j in module.defs.get_repository_def().get_all_jobs()}
    assert {limit["value"] for limit in limits if limit["key"] == "dagster/job_name"} <= jobs
