"""The one Dagster `Definitions` object of verl-health (`dagster dev -w workspace.yaml` loads `defs`)."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions, EnvVar

from pipeline.assets.derive import fleet_table_assets, run_table_assets
from pipeline.assets.detect import anomaly_model, anomaly_model_fresh, step_anomalies
from pipeline.assets.ingest import ingested_run
from pipeline.assets.publish import published_warehouse
from pipeline.assets.report import fleet_report, fleet_report_mail, run_report
from pipeline.executors import run_assets_dask_job
from pipeline.jobs import nightly_job, run_assets_job, run_health_job
from pipeline.resources import ArchiveResource, ReportsResource, SmtpResource, WarehouseResource
from pipeline.schedules import nightly_schedule
from pipeline.sensors import finished_run_sensor, pipeline_failure_mail, run_attention_mail


def _secret(name: str):
    """An EnvVar when the variable is set, so secrets never sit in config; empty otherwise."""
    return EnvVar(name) if os.environ.get(name) else ""


def smtp_from_env() -> SmtpResource:
    """The SMTP resource configured from VERL_HEALTH_SMTP_* / VERL_HEALTH_MAIL_* variables."""
    env = os.environ
    return SmtpResource(
        host=env.get("VERL_HEALTH_SMTP_HOST", ""),
        port=int(env.get("VERL_HEALTH_SMTP_PORT", "587")),
        security=env.get("VERL_HEALTH_SMTP_SECURITY", "starttls"),
        user=_secret("VERL_HEALTH_SMTP_USER"),
        password=_secret("VERL_HEALTH_SMTP_PASSWORD"),
        sender=env.get("VERL_HEALTH_MAIL_FROM", "verl-health@localhost"),
        recipients=[r.strip() for r in env.get("VERL_HEALTH_MAIL_TO", "").split(",") if r.strip()],
        ca_file=env.get("VERL_HEALTH_SMTP_CA_FILE", ""),
        reports_url=env.get("VERL_HEALTH_REPORTS_URL", ""),
    )


def archive_from_env(archive: str | Path, quiet_period_s: int = 600) -> ArchiveResource:
    """The archive resource for `archive`, with the ingest limits of VERL_HEALTH_MAX_RUN_GB / _LINE_MB."""
    return ArchiveResource(
        root=str(archive), quiet_period_s=quiet_period_s,
        max_run_gb=float(os.environ.get("VERL_HEALTH_MAX_RUN_GB", "64")),
        max_line_mb=float(os.environ.get("VERL_HEALTH_MAX_LINE_MB", "64")),
    )


def build_definitions(
    archive: str | Path,
    warehouse: str | Path,
    reports: str | Path,
    quiet_period_s: int = 600,
    smtp: SmtpResource | None = None,
) -> Definitions:
    """Definitions bound to the given archive, warehouse and reports folders."""
    return Definitions(
        assets=[
            ingested_run,
            *run_table_assets,
            *fleet_table_assets,
            anomaly_model,
            step_anomalies,
            run_report,
            fleet_report,
            fleet_report_mail,
            published_warehouse,
        ],
        asset_checks=[anomaly_model_fresh],
        jobs=[run_assets_job, run_assets_dask_job, nightly_job, run_health_job],
        sensors=[finished_run_sensor, pipeline_failure_mail, run_attention_mail],
        schedules=[nightly_schedule],
        resources={
            "archive": archive_from_env(archive, quiet_period_s),
            "warehouse": WarehouseResource(path=str(warehouse)),
            "reports": ReportsResource(path=str(reports)),
            "smtp": smtp or smtp_from_env(),
        },
    )


defs = build_definitions(
    archive=os.environ.get("VERL_HEALTH_ARCHIVE", "data/archive"),
    warehouse=os.environ.get("VERL_HEALTH_WAREHOUSE", "data/warehouse"),
    reports=os.environ.get("VERL_HEALTH_REPORTS", "reports"),
    quiet_period_s=int(os.environ.get("VERL_HEALTH_QUIET_PERIOD_S", "600")),
)
