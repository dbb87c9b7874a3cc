"""The model and step_anomalies in the warehouse: fit the forest on the fleet, save, load, score runs."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pyarrow as pa
import sklearn

from pipeline.detect.features import build_features, fleet_baseline_for, group_medians
from pipeline.detect.model import MODEL_VERSION, AnomalyModelConfig, FittedModel, fit_model
from pipeline.detect.step_anomalies import STEP_ANOMALIES_SCHEMA, run_chunks, runs_part, score_frame
from pipeline.lake import connect, write_run_table

log = logging.getLogger(__name__)

MODEL_DIR = "models"
MODEL_FILE = "anomaly_model.joblib"
MODEL_META = "anomaly_model.json"


@dataclass
class ModelInfo:
    """What fit_anomaly_model saved: paths, training range, feature list, version."""

    path: Path
    meta_path: Path
    n_runs: int
    n_steps: int
    features: tuple[str, ...]
    version: str
    meta: dict


def model_paths(warehouse: str | Path) -> tuple[Path, Path]:
    """Where the model and its JSON description live."""
    folder = Path(warehouse) / MODEL_DIR
    return folder / MODEL_FILE, folder / MODEL_META


def _views(con) -> set[str]:
    return {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}


def read_table(con, table: str, run_ids: list[str] | None) -> pd.DataFrame:
    """A per-step table of the warehouse for the runs (all when None), by run and step; empty if absent."""
    if table not in _views(con):
        return pd.DataFrame()
    if run_ids is None:
        return con.execute(f"select * from {table} order by run_id, step").df()
    return con.execute(
        f"select * from {table} where list_contains($run_ids, run_id) order by run_id, step", {"run_ids": run_ids}
    ).df()


def read_metrics(con, run_ids: list[str]) -> pd.DataFrame | None:
    """The runs' step_metrics rows (None when the lake has none)."""
    if "step_metrics" not in _views(con):
        return None
    return con.execute(
        "select run_id, step, key, value, segment from step_metrics where list_contains($run_ids, run_id)",
        {"run_ids": run_ids},
    ).df()


def _read_runs(con) -> pd.DataFrame:
    return con.execute("select * from runs").df() if "runs" in _views(con) else pd.DataFrame()


def read_config_groups(con) -> pd.Series | None:
    """Each run's config group as run_baselines names it (index run_id; None without that table)."""
    if "run_baselines" not in _views(con):
        return None
    rows = con.execute("select run_id, config_group from run_baselines").df()
    return rows.set_index("run_id")["config_group"]


def fit_anomaly_model(warehouse: str | Path, config: AnomalyModelConfig | None = None) -> ModelInfo:
    """Fit the forest on every step of the warehouse's fleet and save it with its description.

    Writes `<warehouse>/models/anomaly_model.joblib` and `anomaly_model.json` (settings, feature
    list, training runs/steps/dates, sklearn and model versions).
    """
    config = config or AnomalyModelConfig()
    started = time.time()
    con = connect(warehouse)
    phases = read_table(con, "step_phases", None)
    health = read_table(con, "step_health", None)
    runs_df = _read_runs(con)
    if phases.empty:
        con.close()
        raise ValueError(f"no step_phases in {warehouse}: ingest and derive first")
    health = health if not health.empty else phases[["run_id", "step"]]
    runs_df = runs_df if not runs_df.empty else None
    groups = read_config_groups(con)
    table = group_medians(phases, groups)
    baseline = fleet_baseline_for(sorted(phases["run_id"].unique()), groups, table)
    parts = []
    for ids in run_chunks(phases):
        parts.append(build_features(runs_part(phases, ids), runs_part(health, ids), baseline, read_metrics(con, ids)))
    con.close()
    features = pd.concat(parts, ignore_index=True)
    fitted = fit_model(features, config)
    fitted.fleet_baseline = table

    path, meta_path = model_paths(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(fitted, path)
    run_ids = sorted(phases["run_id"].unique())
    training = {
        "n_runs": len(run_ids),
        "n_steps": int(len(features)),
        "runs": run_ids,
        "steps": [int(phases["step"].min()), int(phases["step"].max())],
        "dates": _date_range(runs_df),
    }
    meta = _description(path, fitted, config, training, time.time() - started)
    meta_path.write_text(json.dumps(meta, indent=2))
    return ModelInfo(path, meta_path, len(run_ids), int(len(features)), fitted.features, MODEL_VERSION, meta)


def _date_range(runs: pd.DataFrame | None) -> dict:
    """The earliest and latest first_ts, last_ts and mtime of the training runs (those known)."""
    dates = {}
    for col in ("first_ts", "last_ts", "mtime"):
        if runs is not None and col in runs and runs[col].notna().any():
            dates[col] = [str(runs[col].min()), str(runs[col].max())]
    return dates


def _description(path: Path, fitted: FittedModel, config: AnomalyModelConfig, training: dict, seconds: float) -> dict:
    """The model's JSON description: version, fingerprint of the saved file, when and how it was fitted."""
    return {
        "model_version": MODEL_VERSION,
        "fingerprint": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
        "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fitted_at_unix": round(time.time(), 3),
        "fit_seconds": round(seconds, 2),
        "sklearn_version": sklearn.__version__,
        "settings": asdict(config),
        "features": list(fitted.features),
        "gate_score": fitted.gate,
        "typical_score": fitted.typical_score,
        "training": training,
    }


def load_model(warehouse: str | Path) -> FittedModel | None:
    """The stored model, or None when the warehouse has none yet (or one of an older model version)."""
    path, _ = model_paths(warehouse)
    model = joblib.load(path) if path.exists() else None
    return model if isinstance(model, FittedModel) and hasattr(model, "floor") else None


def _write_partitions(warehouse, result: pd.DataFrame, run_ids: list[str]) -> None:
    table = pa.Table.from_pandas(result[["run_id"] + STEP_ANOMALIES_SCHEMA.names], preserve_index=False)
    table = table.drop_columns(["run_id"]).cast(STEP_ANOMALIES_SCHEMA)
    ids = result["run_id"].to_numpy()
    bounds = {}
    if len(ids):
        change = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        ends = np.r_[change[1:], len(ids)]
        bounds = {ids[s]: (s, e) for s, e in zip(change, ends, strict=True)}
    for rid in run_ids:
        s, e = bounds.get(rid, (0, 0))
        write_run_table(warehouse, "step_anomalies", rid, table.slice(s, e - s))


def score_runs(warehouse: str | Path, run_ids) -> int:
    """Score the runs with the stored model and rewrite their step_anomalies partitions.

    Returns the number of flagged steps. Without a stored model the rules decide alone (logged).
    Runs are scored CHUNK_STEPS steps at a time.
    """
    run_ids = sorted(set(run_ids))
    if not run_ids:
        return 0
    model = load_model(warehouse)
    if model is None:
        log.warning("no anomaly model in %s: scoring with the rules alone", warehouse)
    con = connect(warehouse)
    phases = read_table(con, "step_phases", run_ids)
    health = read_table(con, "step_health", run_ids)
    baseline = None
    if model is not None and model.fleet_baseline is not None:
        baseline = fleet_baseline_for(run_ids, read_config_groups(con), model.fleet_baseline)
    flagged = 0
    scored = set()
    for ids in run_chunks(phases) if not phases.empty else []:
        part_health = runs_part(health, ids) if not health.empty else runs_part(phases, ids)[["run_id", "step"]]
        result = score_frame(runs_part(phases, ids), part_health, model, baseline, metrics=read_metrics(con, ids))
        _write_partitions(warehouse, result, ids)
        flagged += int(result["is_anomaly"].sum())
        scored.update(ids)
    con.close()
    empty = pd.DataFrame(columns=["run_id"] + STEP_ANOMALIES_SCHEMA.names)
    _write_partitions(warehouse, empty, [rid for rid in run_ids if rid not in scored])
    return flagged
