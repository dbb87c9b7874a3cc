"""Detect layer: the fleet-fitted model of normal steps (an isolation forest) and the per-run anomalous steps."""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from pipeline import tables
from pipeline.defs.partitions import run_partitions
from pipeline.defs.resources import WarehouseResource
from pipeline.detect import AnomalyModelConfig, fit_anomaly_model, score_runs
from pipeline.isolation import isolated_runs
from pipeline.lake import table_dir
from pipeline.quality import contract_violations, model_age_days, model_refit_due, refit_after_days


class AnomalyModelSettings(Config):
    """Isolation-forest settings; recorded with the fitted model (decision thresholds: AnomalyModelConfig)."""

    n_estimators: int = Field(default=AnomalyModelConfig.n_estimators, description="Trees in the forest.")
    contamination: float = Field(
        default=AnomalyModelConfig.contamination,
        description="Share of the fleet's ordinary steps the forest ranks as unusual: a rule's weak hit counts only there.",
    )
    max_samples: int = Field(default=AnomalyModelConfig.max_samples, description="Steps drawn per tree.")
    random_state: int = Field(default=AnomalyModelConfig.random_state, description="Fixed seed: refits are repeatable.")


NO_STEPS = "no model fitted: the warehouse has no training step to fit on; steps are scored by the rules alone"


@asset(name=tables.MODEL, deps=tables.MODEL_READS, group_name="detect")
def anomaly_model(context: AssetExecutionContext, config: AnomalyModelSettings, warehouse: WarehouseResource):
    """Isolation forest fitted on the fleet's ordinary steps, over a summary of every signal each run logged;
    saved with its settings, gate and training range. A fleet without a step (runs that died before their
    first) has nothing to fit: no model, said so, and the next analysis with steps fits it."""
    info = fit_anomaly_model(
        warehouse.root,
        AnomalyModelConfig(
            n_estimators=config.n_estimators,
            contamination=config.contamination,
            max_samples=config.max_samples,
            random_state=config.random_state,
        ),
    )
    if info is None:
        context.log.warning(NO_STEPS)
        return MaterializeResult(metadata={"fitted": False, "reason": NO_STEPS})
    context.log.info(f"fitted on {info.n_steps} steps of {info.n_runs} runs")
    return MaterializeResult(
        metadata={
            "steps": info.n_steps,
            "runs": info.n_runs,
            "features": MetadataValue.json(list(info.features)),
            "path": MetadataValue.path(str(info.path)),
            "version": info.version,
            "fitted": True,
        }
    )


@asset_check(asset=anomaly_model, description="The model exists and is younger than the refit age (VERL_HEALTH_REFIT_DAYS).")
def anomaly_model_fresh(warehouse: WarehouseResource) -> AssetCheckResult:
    """Warns when the stored model is missing or due for a refit (as old as VERL_HEALTH_REFIT_DAYS)."""
    age = model_age_days(warehouse.root)
    return AssetCheckResult(
        passed=not model_refit_due(age),
        severity=AssetCheckSeverity.WARN,
        metadata={"age_days": -1.0 if age is None else round(age, 2), "max_age_days": refit_after_days()},
    )


@asset(
    description=tables.table("step_anomalies").description,
    deps=tables.table("step_anomalies").reads,
    partitions_def=run_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="detect",
    check_specs=[AssetCheckSpec("matches_contract", asset="step_anomalies", blocking=True,
                                description="Has every column of the design contract.")],
)
def step_anomalies(context: AssetExecutionContext, warehouse: WarehouseResource):
    """Every step scored by the stored model and the rules, with class, explanation (and, for class `other`,
    the signals that drove the model), and episodes."""
    flagged, run_ids = isolated_runs(warehouse.root, "step_anomalies", list(context.partition_keys),
                                     lambda ids: score_runs(warehouse.root, ids), context.log)
    yield MaterializeResult(
        metadata={
            "runs": len(run_ids),
            "failed_runs": len(context.partition_keys) - len(run_ids),
            "flagged_steps": sum(flagged),
            "path": MetadataValue.path(str(table_dir(warehouse.root, "step_anomalies"))),
        }
    )
    missing = contract_violations(warehouse.root, "step_anomalies", run_ids)
    yield AssetCheckResult(check_name="matches_contract", passed=not missing,
                           metadata={"missing_columns": MetadataValue.json(missing)})
