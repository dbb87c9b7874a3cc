"""The fleet-fitted isolation forest, the final decision (model gate + rules + hysteresis) and step_anomalies."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pyarrow as pa
import sklearn
from sklearn.ensemble import IsolationForest

from pipeline.detect.explain import advice_text, episodes, explain_steps
from pipeline.detect.features import (
    CHANNELS,
    build_features,
    features_of,
    fleet_baseline_for,
    group_medians,
    merge_steps,
)
from pipeline.detect.rules import OPS, Rule, apply_rules, load_rules
from pipeline.lake import connect, write_run_table

log = logging.getLogger(__name__)

MODEL_VERSION = "1.0"
MODEL_DIR = "models"
MODEL_FILE = "anomaly_model.joblib"
MODEL_META = "anomaly_model.json"

MODEL_FEATURES = (
    tuple(f"z_{c}" for c in CHANNELS)
    + tuple(f"zs_{c}" for c in CHANNELS)
    + ("nonfinite", "mem_fraction", "pg_clipfrac", "share_gen_delta", "share_old_log_prob_delta",
       "share_update_actor_delta")
)
Z_CLIP = 30.0
QUANTILE_SAMPLE = 200_000

DEFAULT_THRESHOLDS = {
    # an attribute rule this many times past its threshold flags without the model's agreement
    "strong": 2.0,
    # ... and so does one whose feature's 3-step mean is past this fraction of the threshold
    "sustained": 1.0,
    # hysteresis: a flagged episode grows over neighbouring steps whose class feature is past
    # this fraction of the rule threshold
    "loose": 0.5,
    # model-only flags (class "other") need a score beyond this quantile of the training scores
    "extreme_quantile": 0.9995,
}

STEP_ANOMALIES_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("is_anomaly", pa.bool_()),
        ("score", pa.float64()),
        ("anomaly_class", pa.string()),
        ("explanation", pa.string()),
        ("episode_id", pa.int64()),
        ("episode_first_step", pa.int64()),
        ("episode_last_step", pa.int64()),
        ("rule_hits", pa.list_(pa.string())),
        ("advice", pa.string()),
    ]
)


@dataclass
class AnomalyModelConfig:
    """Isolation-forest settings, recorded with the model.

    n_estimators: trees (100 keeps scoring a million steps well under a minute).
    contamination: expected share of anomalous steps in the fleet; sets the model gate.
    max_samples: steps drawn per tree.
    random_state: fixed, so a refit on the same fleet gives the same model.
    thresholds: decision thresholds (see DEFAULT_THRESHOLDS).
    """

    n_estimators: int = 100
    contamination: float = 0.03
    max_samples: int = 256
    random_state: int = 20250704
    thresholds: dict = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))


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


@dataclass
class FittedModel:
    """The forest with the score thresholds and fleet baseline it was fitted with."""

    forest: IsolationForest | None
    features: tuple[str, ...]
    extreme: float
    thresholds: dict
    fleet_baseline: pd.DataFrame | None = None


def model_matrix(features: pd.DataFrame, names: tuple[str, ...] = MODEL_FEATURES) -> np.ndarray:
    """The forest's input: the named feature columns, z-scores clipped, missing values as 0."""
    cols = [features[c].to_numpy(dtype=float) if c in features else np.zeros(len(features)) for c in names]
    x = np.column_stack(cols) if cols else np.zeros((len(features), 0))
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=Z_CLIP, neginf=-Z_CLIP), -Z_CLIP, Z_CLIP)


def fit_model(features: pd.DataFrame, config: AnomalyModelConfig | None = None) -> FittedModel:
    """Fit the isolation forest on feature rows (pure: no files)."""
    config = config or AnomalyModelConfig()
    x = model_matrix(features)
    forest = IsolationForest(
        n_estimators=config.n_estimators,
        contamination=config.contamination,
        max_samples=min(config.max_samples, len(x)),
        random_state=config.random_state,
    ).fit(x)
    # the quantile needs no more than a sample of the fleet's steps
    sample = np.random.default_rng(config.random_state).choice(len(x), min(len(x), QUANTILE_SAMPLE), replace=False)
    scores = -forest.score_samples(x[sample])
    extreme = float(np.quantile(scores, config.thresholds.get("extreme_quantile", 0.9995)))
    return FittedModel(forest, MODEL_FEATURES, extreme, dict(config.thresholds))


def _class_matrix(hits: pd.DataFrame, strength: pd.DataFrame, rules: tuple[Rule, ...], classes: list[str]):
    """Per class, the best rule score of each step (weight tie-break + strength), 0 where none fires."""
    out = np.zeros((len(hits), len(classes)))
    col = {c: i for i, c in enumerate(classes)}
    for rule in rules:
        fired = hits[rule.name].to_numpy()
        score = np.where(fired, strength[rule.name].to_numpy() + rule.weight / 100.0, 0.0)
        j = col[rule.anomaly_class]
        out[:, j] = np.maximum(out[:, j], score)
    return out


def _grow(runs: np.ndarray, seed: np.ndarray, loose: np.ndarray) -> np.ndarray:
    """Steps in a run of consecutive `loose` steps that contains a `seed` step (hysteresis)."""
    n = len(seed)
    loose = loose | seed
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = runs[1:] != runs[:-1]
    prev = np.zeros(n, dtype=bool)
    prev[1:] = loose[:-1]
    starts = loose & (new_run | ~prev)
    comp = np.cumsum(starts)
    comp = np.where(loose, comp, 0)
    has_seed = np.bincount(comp, weights=seed.astype(float), minlength=comp.max() + 1) > 0
    has_seed[0] = False
    return has_seed[comp]


def _smoothed(features: pd.DataFrame, feature: str) -> np.ndarray | None:
    """The 3-step centred mean of a z feature (`zs_...`), if there is one."""
    name = "zs_" + feature[2:] if feature.startswith("z_") else None
    return features[name].to_numpy(dtype=float) if name in features else None


def decide(
    features: pd.DataFrame,
    model: FittedModel | None = None,
    rules: tuple[Rule, ...] | None = None,
    thresholds: dict | None = None,
    use_model: bool = True,
) -> pd.DataFrame:
    """The final decision per step: is_anomaly, score, anomaly_class and the rules that fired.

    A step is flagged when a "flag" rule fires, or an "attribute" rule fires `strong` times past
    its threshold or with its 3-step mean past `sustained` x the threshold, or an attribute rule
    fires and the forest's gate (its contamination threshold) agrees, or, as class `other`, the
    forest's score alone is beyond the extreme quantile (never on a testing/checkpoint step).
    Flagged stretches then grow over neighbouring steps where the same class's feature stays
    past `loose` x its threshold (hysteresis). A step's class is its strongest rule's; consecutive
    flagged steps of one class form an episode. `use_model=False` leaves the forest out.
    """
    rules = rules or load_rules()
    th = dict(DEFAULT_THRESHOLDS)
    if model is not None:
        th.update(model.thresholds)
    th.update(thresholds or {})
    n = len(features)
    runs = features["run_id"].to_numpy()
    steps = features["step"].to_numpy()
    hits, strength = apply_rules(features, rules)
    classes = sorted({r.anomaly_class for r in rules})
    cls_score = _class_matrix(hits, strength, rules, classes)

    flag_rules = [r for r in rules if r.mode == "flag"]
    attr_rules = [r for r in rules if r.mode == "attribute"]
    flag_hit = hits[[r.name for r in flag_rules]].to_numpy().any(axis=1) if flag_rules else np.zeros(n, bool)
    attr_hit = hits[[r.name for r in attr_rules]].to_numpy().any(axis=1) if attr_rules else np.zeros(n, bool)
    attr_strong = np.zeros(n, bool)
    for r in attr_rules:
        fired = hits[r.name].to_numpy()
        attr_strong |= fired & (strength[r.name].to_numpy() >= th["strong"])
        f, op, v = r.when[0]
        smooth = _smoothed(features, f)
        if smooth is not None:
            # sustained: the 3-step mean is past the threshold too
            with np.errstate(invalid="ignore"):
                attr_strong |= fired & (OPS[op](smooth, v * th["sustained"]))

    if model is not None and model.forest is not None and use_model:
        x = model_matrix(features, model.features)
        raw = model.forest.score_samples(x)
        score = -raw
        gate = (raw - model.forest.offset_) < 0
        extreme = score > model.extreme
    else:
        score = np.full(n, np.nan)
        gate = np.zeros(n, bool)
        extreme = np.zeros(n, bool)
    periodic = features["periodic"].to_numpy(dtype=bool) if "periodic" in features else np.zeros(n, bool)

    seed_flag = flag_hit | attr_strong | (attr_hit & gate)
    other = extreme & ~seed_flag & ~attr_hit & ~periodic
    step_cls = np.array(classes, dtype=object)[cls_score.argmax(axis=1)] if classes else np.full(n, "other")

    # hysteresis per class on the class's z feature
    flagged = seed_flag | other
    final_cls = np.where(seed_flag, step_cls, np.where(other, "other", None)).astype(object)
    for cls in classes:
        zrules = [r for r in attr_rules if r.anomaly_class == cls and r.when[0][0].startswith("z_")]
        if not zrules:
            continue
        seed = seed_flag & (step_cls == cls)
        if not seed.any():
            continue
        loose = np.zeros(n, bool)
        for r in zrules:
            f, op, v = r.when[0]
            z = features[f].to_numpy(dtype=float)
            zs = _smoothed(features, f)
            zs = z if zs is None else zs
            with np.errstate(invalid="ignore"):
                if op in (">", ">="):
                    loose |= (z > v * th["loose"]) | (zs > v * th["loose"])
                else:
                    loose |= (z < v * th["loose"]) | (zs < v * th["loose"])
        grown = _grow(runs, seed, loose) & ~flagged
        final_cls = np.where(grown, cls, final_cls)
        flagged |= grown

    # a step's class is its strongest rule's class; steps no rule names (grown, model-only) keep
    # the class they were given; a lone step between two steps of one class takes that class
    named = flagged & (cls_score.max(axis=1) > 0)
    final_cls = np.where(named, step_cls, final_cls)
    final_cls = np.where(flagged, final_cls, None)
    same_run = np.r_[False, runs[1:] == runs[:-1]] & np.r_[runs[:-1] == runs[1:], False]
    prev_cls = np.r_[None, final_cls[:-1]]
    next_cls = np.r_[final_cls[1:], None]
    lone = flagged & same_run & (prev_cls == next_cls) & (prev_cls != final_cls) & (prev_cls != None)  # noqa: E711
    final_cls = np.where(lone, prev_cls, final_cls)
    ep_id, first, last = episodes(runs, steps, flagged, final_cls)

    fired_names = np.array([r.name for r in rules], dtype=object)
    hit_mat = hits.to_numpy()
    rule_hits = np.full(n, None, dtype=object)
    for i in np.flatnonzero(flagged):
        rule_hits[i] = list(fired_names[hit_mat[i]])

    return pd.DataFrame(
        {
            "run_id": runs,
            "step": steps,
            "is_anomaly": flagged,
            "score": score,
            "anomaly_class": np.where(flagged, final_cls, None),
            "episode_id": np.where(flagged, ep_id, 0),
            "episode_first_step": first,
            "episode_last_step": last,
            "rule_hits": rule_hits,
        },
        index=features.index,
    )


def score_frame(
    phases: pd.DataFrame,
    health: pd.DataFrame,
    model: FittedModel | None = None,
    fleet_baseline: pd.DataFrame | None = None,
    thresholds: dict | None = None,
) -> pd.DataFrame:
    """step_anomalies rows (with run_id) for the steps of `phases`: pure, no files.

    Without a model the rules and hysteresis decide alone and `score` is NaN.
    """
    raw = merge_steps(phases, health)
    features = features_of(raw, fleet_baseline)
    result = decide(features, model, thresholds=thresholds)
    if "reward_mean" in raw and "score_mean" in raw:
        raw["reward_mean"] = raw["reward_mean"].fillna(raw["score_mean"])
    elif "score_mean" in raw:
        raw["reward_mean"] = raw["score_mean"]
    flagged = result["is_anomaly"].to_numpy()
    result["explanation"] = explain_steps(features, raw, flagged, result["anomaly_class"].to_numpy())
    advice = {c: advice_text("anomaly_class", c) for c in result["anomaly_class"].dropna().unique()}
    result["advice"] = result["anomaly_class"].map(advice)
    result.loc[~result["is_anomaly"], "episode_first_step"] = None
    result.loc[~result["is_anomaly"], "episode_last_step"] = None
    result.loc[~result["is_anomaly"], "episode_id"] = None
    return result


# ---------------------------------------------------------------- warehouse entry points


def model_paths(warehouse: str | Path) -> tuple[Path, Path]:
    """Where the model and its JSON description live."""
    folder = Path(warehouse) / MODEL_DIR
    return folder / MODEL_FILE, folder / MODEL_META


def _read(con, table: str, run_ids: list[str] | None) -> pd.DataFrame:
    views = {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
    if table not in views:
        return pd.DataFrame()
    if run_ids is None:
        return con.execute(f"select * from {table} order by run_id, step").df()
    return con.execute(
        f"select * from {table} where list_contains($run_ids, run_id) order by run_id, step", {"run_ids": run_ids}
    ).df()


def _read_runs(con) -> pd.DataFrame:
    views = {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
    return con.execute("select * from runs").df() if "runs" in views else pd.DataFrame()


def fit_anomaly_model(warehouse: str | Path, config: AnomalyModelConfig | None = None) -> ModelInfo:
    """Fit the forest on every step of the warehouse's fleet and save it with its description.

    Writes `<warehouse>/models/anomaly_model.joblib` and `anomaly_model.json` (settings, feature
    list, training runs/steps/dates, sklearn and model versions).
    """
    config = config or AnomalyModelConfig()
    started = time.time()
    con = connect(warehouse)
    phases = _read(con, "step_phases", None)
    health = _read(con, "step_health", None)
    runs_df = _read_runs(con)
    con.close()
    if phases.empty:
        raise ValueError(f"no step_phases in {warehouse}: ingest and derive first")
    runs_df = runs_df if not runs_df.empty else None
    table = group_medians(phases, runs_df)
    baseline = fleet_baseline_for(sorted(phases["run_id"].unique()), runs_df, table)
    features = build_features(phases, health if not health.empty else phases[["run_id", "step"]], baseline)
    fitted = fit_model(features, config)
    fitted.fleet_baseline = table

    path, meta_path = model_paths(warehouse)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(fitted, path)
    run_ids = sorted(phases["run_id"].unique())
    dates = {}
    for col in ("first_ts", "last_ts", "mtime"):
        if runs_df is not None and col in runs_df and runs_df[col].notna().any():
            dates[col] = [str(runs_df[col].min()), str(runs_df[col].max())]
    meta = {
        "model_version": MODEL_VERSION,
        "fingerprint": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
        "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fitted_at_unix": round(time.time(), 3),
        "fit_seconds": round(time.time() - started, 2),
        "sklearn_version": sklearn.__version__,
        "settings": asdict(config),
        "features": list(fitted.features),
        "extreme_score": fitted.extreme,
        "training": {
            "n_runs": len(run_ids),
            "n_steps": int(len(features)),
            "runs": run_ids,
            "steps": [int(phases["step"].min()), int(phases["step"].max())],
            "dates": dates,
        },
    }
    meta_path.write_text(json.dumps(meta, indent=2))
    return ModelInfo(path, meta_path, len(run_ids), int(len(features)), fitted.features, MODEL_VERSION, meta)


def load_model(warehouse: str | Path) -> FittedModel | None:
    """The stored model, or None when the warehouse has none yet."""
    path, _ = model_paths(warehouse)
    return joblib.load(path) if path.exists() else None


def score_runs(warehouse: str | Path, run_ids) -> int:
    """Score the runs with the stored model and rewrite their step_anomalies partitions.

    Returns the number of flagged steps. Without a stored model the rules decide alone (logged).
    """
    run_ids = sorted(set(run_ids))
    if not run_ids:
        return 0
    model = load_model(warehouse)
    if model is None:
        log.warning("no anomaly model in %s: scoring with the rules alone", warehouse)
    con = connect(warehouse)
    phases = _read(con, "step_phases", run_ids)
    health = _read(con, "step_health", run_ids)
    runs_df = _read_runs(con)
    con.close()
    baseline = None
    if model is not None and model.fleet_baseline is not None:
        baseline = fleet_baseline_for(run_ids, runs_df if not runs_df.empty else None, model.fleet_baseline)
    if phases.empty:
        result = pd.DataFrame(columns=["run_id"] + STEP_ANOMALIES_SCHEMA.names)
    else:
        if health.empty:
            health = phases[["run_id", "step"]]
        result = score_frame(phases, health, model, baseline)
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
    return int(result["is_anomaly"].sum())
