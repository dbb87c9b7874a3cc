"""The shipped deployment configs load: the instance yaml, and the dask run configs validate against the job."""

import shutil
from pathlib import Path

import yaml
from dagster import DagsterInstance, validate_run_config
from operate_support import ROOT

DEPLOY = ROOT / "deploy"


def test_instance_yaml_uses_the_queued_coordinator(tmp_path, monkeypatch):
    shutil.copy(DEPLOY / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with DagsterInstance.get() as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_coordinator.get_run_queue_config().max_concurrent_runs == 2


def test_dask_run_configs_validate(monkeypatch):
    from pipeline.definitions import defs

    job = defs.resolve_job_def("run_assets_dask_job")
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8786")
    for name in ("dask.yaml", "dask-local.yaml"):
        config = yaml.safe_load(Path(DEPLOY / name).read_text())
        assert validate_run_config(job, config), name


def test_multiprocess_run_config_validates():
    from pipeline.definitions import defs

    config = yaml.safe_load((DEPLOY / "multiprocess.yaml").read_text())
    for name in ("run_assets_job", "nightly_job"):
        assert validate_run_config(defs.resolve_job_def(name), config), name


def test_kubernetes_examples_parse():
    for path in (DEPLOY / "k8s").glob("*.yaml"):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert docs and all(isinstance(d, dict) for d in docs), path
