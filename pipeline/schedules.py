"""The nightly schedule: fleet tables, a model refit when due, the fleet report and its mail."""

from __future__ import annotations

import os

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from pipeline.assets.report import DAY_TAG
from pipeline.assets import NIGHTLY_ASSETS
from pipeline.jobs import nightly_job
from pipeline.quality import model_age_days, model_refit_due
from pipeline.resources import WarehouseResource
from pipeline.tables import MODEL

NIGHTLY_CRON = os.environ.get("VERL_HEALTH_NIGHTLY_CRON", "0 2 * * *")
NIGHTLY_TIMEZONE = os.environ.get("VERL_HEALTH_TIMEZONE", "UTC")


def nightly_selection(model_age: float | None, limit_days: float | None = None) -> list[str]:
    """Assets the nightly run materialises: the model only when it is missing or older than the limit."""
    due = model_refit_due(model_age, limit_days)
    return [*NIGHTLY_ASSETS, MODEL] if due else list(NIGHTLY_ASSETS)


@schedule(
    job=nightly_job,
    cron_schedule=NIGHTLY_CRON,
    execution_timezone=NIGHTLY_TIMEZONE,
    default_status=DefaultScheduleStatus.STOPPED,
    description="Every night: rebuild fleet tables, refit the model when due, render and mail the fleet report.",
)
def nightly_schedule(context: ScheduleEvaluationContext, warehouse: WarehouseResource):
    """One run per night, keyed by its date so a retried tick does not run twice; the model's age is
    taken at the tick."""
    tick = context.scheduled_execution_time
    day = tick.date().isoformat()
    selection = nightly_selection(model_age_days(warehouse.root, now=tick.timestamp()))
    return RunRequest(
        run_key=f"nightly-{day}",
        asset_selection=[_key(a) for a in selection],
        tags={DAY_TAG: day},
    )


def _key(name: str):
    from dagster import AssetKey

    return AssetKey(name)
