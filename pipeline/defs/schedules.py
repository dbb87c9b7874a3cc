"""The nightly schedule: fleet tables, a model refit when due, the fleet report and its mail."""

from __future__ import annotations

from dagster import (
    AssetKey,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    schedule,
)

from pipeline.defs.assets import NIGHTLY_ASSETS
from pipeline.defs.assets.report import DAY_TAG, MAIL_TAG
from pipeline.defs.jobs import FORKED_STEPS, analyze_batch
from pipeline.defs.resources import WarehouseResource
from pipeline.quality import model_age_days, model_refit_due
from pipeline.settings import setting
from pipeline.tables import MODEL

# a tag on the nightly runs, so a deployment can keep them from overlapping (deploy/dagster.yaml)
NIGHTLY_TAG = "verl-health/nightly"


def nightly_selection(model_age: float | None, limit_days: float | None = None) -> list[str]:
    """Assets the nightly run materialises: the model only when it is missing or older than the limit."""
    due = model_refit_due(model_age, limit_days)
    return [*NIGHTLY_ASSETS, MODEL] if due else list(NIGHTLY_ASSETS)


def nightly_requests(context: ScheduleEvaluationContext, warehouse: WarehouseResource) -> RunRequest:
    """One run of `analyze_batch` per night over no run partition, keyed by its date so a retried tick does not
    run twice, mailing its fleet report; the model's age is taken at the tick."""
    tick = context.scheduled_execution_time
    day = tick.date().isoformat()
    selection = nightly_selection(model_age_days(warehouse.root, now=tick.timestamp()))
    # a run over no partition gets no partition's default config: the job's forked step processes, said again
    return RunRequest(run_key=f"nightly-{day}", asset_selection=[AssetKey(a) for a in selection],
                      run_config=FORKED_STEPS, tags={DAY_TAG: day, MAIL_TAG: "true", NIGHTLY_TAG: "true"})


def nightly_schedule(cron: str | None = None, timezone: str | None = None) -> ScheduleDefinition:
    """The nightly schedule; its cron and timezone are VERL_HEALTH_NIGHTLY_CRON and VERL_HEALTH_TIMEZONE
    unless given, read when the definitions are built (a schedule's cron is fixed once the code location loads)."""
    return schedule(
        job=analyze_batch,
        name="nightly_schedule",
        cron_schedule=cron or setting("VERL_HEALTH_NIGHTLY_CRON"),
        execution_timezone=timezone or setting("VERL_HEALTH_TIMEZONE"),
        default_status=DefaultScheduleStatus.STOPPED,
        description="Every night: rebuild fleet tables, refit the model when due, render and mail the fleet report.",
    )(nightly_requests)
