"""The one Dagster `Definitions` object of verl-health (`dagster dev -w workspace.yaml` loads `defs`)."""

from __future__ import annotations

import warnings
from pathlib import Path

from dagster import Definitions, JobDefinition, build_reconstructable_job

from pipeline.defs.assets import ASSET_CHECKS, ASSETS
from pipeline.defs.jobs import analyze_batch
from pipeline.defs.launchers import analyze_archive_job, run_health_job
from pipeline.defs.resources import SmtpResource, archive_from_env, bound_resources, smtp_from_env
from pipeline.defs.schedules import nightly_schedule
from pipeline.defs.sensors import finished_run_sensor, pipeline_failure_mail, run_attention_mail

ROOT = Path(__file__).resolve().parents[1]
# the packages of the `dask` extra (pyproject.toml), which pipeline.defs.executors imports
DASK_EXTRA = ("dask", "distributed", "dagster_dask")


def optional_jobs() -> list:
    """Jobs whose executor comes with an extra: `run_assets_dask_job` when the `dask` extra is installed; without
    it the job is left out with a warning, and the rest of the definitions load."""
    try:
        from pipeline.defs.executors import run_assets_dask_job
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in DASK_EXTRA:
            raise
        warnings.warn(f"run_assets_dask_job left out: {exc.name} is not installed "
                      "(pip install 'verl-health[dask]')", stacklevel=2)
        return []
    return [run_assets_dask_job]


def build_definitions(
    archive: str | Path | None = None,
    warehouse: str | Path | None = None,
    reports: str | Path | None = None,
    quiet_period_s: int | None = None,
    smtp: SmtpResource | None = None,
) -> Definitions:
    """Definitions bound to the given archive, warehouse and reports folders; what is not given is read from
    its VERL_HEALTH_* setting when a run or a sensor tick starts (pipeline/settings.py)."""
    return Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=[analyze_batch, run_health_job, analyze_archive_job, *optional_jobs()],
        sensors=[finished_run_sensor, pipeline_failure_mail, run_attention_mail],
        schedules=[nightly_schedule()],
        resources=bound_resources(archive, warehouse, reports, quiet_period_s, smtp),
    )


defs = build_definitions()


def job_of_defs(name: str) -> JobDefinition:
    """The job `name` of `defs`, resolved (what another process rebuilds from `reconstructable_job`)."""
    return defs.resolve_job_def(name)


def reconstructable_job(name: str, working_directory: str | Path = ROOT):
    """A job of `defs` that other processes (dask workers, step processes) can rebuild by importing this module."""
    return build_reconstructable_job(
        "pipeline.defs.definitions", "job_of_defs", reconstructable_args=(name,),
        reconstructor_working_directory=str(working_directory),
    )


# the command line and the mail tests build these resources from the environment
__all__ = ["archive_from_env", "build_definitions", "defs", "job_of_defs", "reconstructable_job", "smtp_from_env"]
