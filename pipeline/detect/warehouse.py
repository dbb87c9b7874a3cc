"""The model and step_anomalies in the warehouse: fit the forest on the fleet, save, load, score runs."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import pickle
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.detect.features import build_features, fleet_baseline_for, group_table, run_medians
from pipeline.detect.model import (
    MODEL_VERSION,
    AnomalyModelConfig,
    FittedModel,
    fit_training_rows,
    training_rows,
)
from pipeline.detect.step_anomalies import STEP_ANOMALIES_SCHEMA, chunks_of, score_frame
from pipeline.lake import check_run_id, reader, staged_run_partitions, table_source
from pipeline.tables import in_last_launch

log = logging.getLogger(__name__)

MODEL_DIR = "models"
MODEL_FILE = "anomaly_model.joblib"
MODEL_META = "anomaly_model.json"
DATE_COLUMNS = ("first_ts", "last_ts", "mtime")
ANOMALIES = "step_anomalies"


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


def _arrow(con, warehouse: str | Path, table: str, run_ids: list[str] | None, query: str,
           params: dict | None = None) -> pa.Table | None:
    """`query` (its `{source}`: the table's Parquet files, only the runs' partitions when `run_ids` is given)
    as an Arrow table; None when the warehouse has no such table (or none of the runs' partitions)."""
    source = table_source(warehouse, table, run_ids)
    return None if source is None else con.sql(query.format(source=source), params=params).to_arrow_table()


def detector_frame(data: pa.Table) -> pd.DataFrame:
    """Arrow to pandas without the list and map columns (step_health's nan_keys, verl_values): the
    detector reads none, and turning them into Python objects row by row was most of a read."""
    return data.drop_columns([f.name for f in data.schema if pa.types.is_nested(f.type)]).to_pandas()


def read_table(con, warehouse: str | Path, table: str, run_ids: list[str] | None) -> pd.DataFrame:
    """A per-step table of the warehouse for the runs (all when None), by run and step, without its
    list and map columns; empty if absent. `con`: any DuckDB connection (it reads the files itself)."""
    data = _arrow(con, warehouse, table, run_ids, "select * from {source} order by run_id, step")
    return pd.DataFrame() if data is None else detector_frame(data)


def _step_frames(con, warehouse: str | Path, run_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs' step_phases and step_health rows (their run and step alone where they have no step_health)."""
    phases = read_table(con, warehouse, "step_phases", run_ids)
    health = read_table(con, warehouse, "step_health", run_ids)
    return phases, health if not health.empty else phases[["run_id", "step"]]


def read_metrics(con, warehouse: str | Path, run_ids: list[str]) -> pd.DataFrame | None:
    """The runs' step_metrics rows of their logs' last launch (run_launches; None when the lake has none)."""
    source = table_source(warehouse, "step_metrics", run_ids)
    if source is None:
        return None
    launches = table_source(warehouse, "run_launches", run_ids)
    scope = "" if launches is None else f" left join {launches} as la using (run_id) where {in_last_launch('m')}"
    data = con.sql(f"select m.run_id, m.step, m.key, m.value, m.segment from {source} as m{scope}").to_arrow_table()
    # categories: a run id or key as one Python string per row was most of a chunk's memory
    return data.to_pandas(strings_to_categorical=True)


def _read_runs(con, warehouse: str | Path) -> pd.DataFrame:
    """The runs table's dates (first_ts, last_ts, mtime: those it has); empty without the table."""
    # only those columns: the others (the config, the final metrics) were most of the read
    data = _arrow(con, warehouse, "runs", None, "select columns(lambda c: list_contains($names, c)) from {source}",
                  {"names": ["run_id", *DATE_COLUMNS]})
    return pd.DataFrame() if data is None else data.to_pandas()


def read_config_groups(con, warehouse: str | Path) -> pd.Series | None:
    """Each run's config group as run_baselines names it (index run_id; None without that table)."""
    data = _arrow(con, warehouse, "run_baselines", None, "select run_id, config_group from {source}")
    return None if data is None else data.to_pandas().set_index("run_id")["config_group"]


def step_counts(con, warehouse: str | Path, run_ids: list[str] | None = None) -> pd.Series:
    """Steps per run in step_phases (index run_id, sorted), of `run_ids` (all when None): what a chunk
    of runs is cut by before any of their rows are read."""
    data = _arrow(con, warehouse, "step_phases", run_ids, "select run_id, count(*) as n from {source} group by run_id")
    if data is None:
        return pd.Series(dtype="int64")
    counts = data.to_pandas().set_index("run_id")["n"]
    return counts.sort_index()


def fit_anomaly_model(warehouse: str | Path, config: AnomalyModelConfig | None = None) -> ModelInfo | None:
    """Fit the forest on every step of the warehouse's fleet and save it with its description.

    Writes `<warehouse>/models/anomaly_model.joblib` and `anomaly_model.json` (settings, feature
    list, training runs/steps/dates, sklearn and model versions). None, and nothing written, when
    the warehouse has no step to fit on (no step_phases row). The fleet is read a chunk of runs at a time
    (`chunks_of`), twice: its runs' median phase times first (the config groups' baselines), then
    their features, of which only the few numbers a step the fit reads are kept (`training_rows`).
    """
    config = config or AnomalyModelConfig()
    started = time.time()
    with reader(warehouse, only=()) as con:
        counts = step_counts(con, warehouse)
        if counts.empty:
            return None
        chunks = chunks_of(counts)
        groups = read_config_groups(con, warehouse)
        table = group_table(pd.concat([run_medians(read_table(con, warehouse, "step_phases", ids)) for ids in chunks]),
                            groups)
        baseline = fleet_baseline_for(list(counts.index), groups, table)
        parts, steps = [], []
        for ids in chunks:
            phases, health = _step_frames(con, warehouse, ids)
            features = build_features(phases, health, baseline, read_metrics(con, warehouse, ids))
            parts.append(training_rows(features))
            steps += [int(phases["step"].min()), int(phases["step"].max())]
        runs_df = _read_runs(con, warehouse)
        runs_df = runs_df if not runs_df.empty else None
    rows = pd.concat(parts, ignore_index=True)
    fitted = fit_training_rows(rows, config)
    fitted.fleet_baseline = table

    path, meta_path = model_paths(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a plain pickle (joblib.load reads it too): the model is numpy arrays and a frame, so loading it to score
    # a run imports neither joblib nor scikit-learn
    path.write_bytes(pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL))
    run_ids = list(counts.index)
    training = {
        "n_runs": len(run_ids),
        "n_steps": int(len(rows)),
        "runs": run_ids,
        "steps": [min(steps), max(steps)],
        "dates": _date_range(runs_df),
    }
    meta = _description(path, fitted, config, training, time.time() - started)
    meta_path.write_text(json.dumps(meta, indent=2))
    return ModelInfo(path, meta_path, len(run_ids), int(len(rows)), fitted.features, MODEL_VERSION, meta)


def _date_range(runs: pd.DataFrame | None) -> dict:
    """The earliest and latest first_ts, last_ts and mtime of the training runs (those known)."""
    dates = {}
    for col in DATE_COLUMNS:
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
        "sklearn_version": importlib.metadata.version("scikit-learn"),
        "settings": asdict(config),
        "features": list(fitted.features),
        "gate_score": fitted.gate,
        "typical_score": fitted.typical_score,
        "training": training,
    }


def load_model(warehouse: str | Path) -> FittedModel | None:
    """The stored model, or None when the warehouse has none yet (or one of an older model version, or one
    that cannot be read)."""
    path, _ = model_paths(warehouse)
    try:
        model = pickle.loads(path.read_bytes()) if path.exists() else None
    except Exception:  # noqa: BLE001 - a damaged pickle raises whatever its bytes make the unpickler do
        model = None
    return model if isinstance(model, FittedModel) and hasattr(model, "floor") else None


def discard_damaged_model(warehouse: str | Path) -> bool:
    """Remove a stored model whose file no longer has the fingerprint its description recorded (cut short,
    overwritten), whose description cannot be read, or of another model version (MODEL_VERSION), so that it is
    fitted again; True when one was removed."""
    path, meta_path = model_paths(warehouse)
    if not path.exists() and not meta_path.exists():
        return False
    try:
        meta = json.loads(meta_path.read_text())
        intact = (hashlib.sha256(path.read_bytes()).hexdigest()[:16] == meta["fingerprint"]
                  and meta["model_version"] == MODEL_VERSION)
    except (OSError, ValueError, KeyError, TypeError):
        intact = False
    if not intact:
        path.unlink(missing_ok=True)
        meta_path.unlink(missing_ok=True)
    return not intact


def _write_partitions(warehouse, result: pd.DataFrame, run_ids: list[str]) -> None:
    """Replace the runs' step_anomalies partitions with their rows of `result` (none: an empty file).

    Every file is written into one staging folder, then each is swapped into place under its lock
    (`lake.swap_all_into_place`, which removes the replaced folders together: one at a time, their
    removals' waits on the disk were most of the write)."""
    if not run_ids:
        return
    table = pa.Table.from_pandas(result[["run_id"] + STEP_ANOMALIES_SCHEMA.names], preserve_index=False)
    table = table.drop_columns(["run_id"]).cast(STEP_ANOMALIES_SCHEMA)
    ids = result["run_id"].to_numpy()
    bounds = {}
    if len(ids):
        change = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        ends = np.r_[change[1:], len(ids)]
        bounds = {ids[s]: (s, e) for s, e in zip(change, ends, strict=True)}
    with staged_run_partitions(warehouse, ANOMALIES, run_ids) as staging:
        for rid in run_ids:
            part = staging / f"run_id={check_run_id(rid)}"
            part.mkdir()
            s, e = bounds.get(rid, (0, 0))
            pq.write_table(table.slice(s, e - s), part / "part-0.parquet", compression="zstd")


def score_runs(warehouse: str | Path, run_ids) -> int:
    """Score the runs with the stored model and rewrite their step_anomalies partitions.

    Returns the number of flagged steps. Without a stored model the rules decide alone (logged).
    Runs are read and scored about CHUNK_STEPS steps at a time (`chunks_of`).
    """
    run_ids = sorted(set(run_ids))
    if not run_ids:
        return 0
    model = load_model(warehouse)
    if model is None:
        log.warning("no anomaly model in %s: scoring with the rules alone", warehouse)
    flagged = 0
    scored = set()
    with reader(warehouse, only=()) as con:
        baseline = None
        if model is not None and model.fleet_baseline is not None:
            baseline = fleet_baseline_for(run_ids, read_config_groups(con, warehouse), model.fleet_baseline)
        for ids in chunks_of(step_counts(con, warehouse, run_ids)):
            phases, health = _step_frames(con, warehouse, ids)
            result = score_frame(phases, health, model, baseline, metrics=read_metrics(con, warehouse, ids))
            _write_partitions(warehouse, result, ids)
            flagged += int(result["is_anomaly"].sum())
            scored.update(ids)
    empty = pd.DataFrame(columns=["run_id"] + STEP_ANOMALIES_SCHEMA.names)
    _write_partitions(warehouse, empty, [rid for rid in run_ids if rid not in scored])
    return flagged
