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

from pipeline.detect.drivers import episode_explanations
from pipeline.detect.explain import advice_text, episodes, explain_steps
from pipeline.detect.features import (
    build_features,
    features_of,
    fleet_baseline_for,
    group_medians,
    merge_steps,
)
from pipeline.detect.rules import OPS, Rule, apply_rules, load_rules
from pipeline.detect.signals import MOVED_Z, SIGNAL_FEATURES, signal_summary
from pipeline.lake import connect, write_run_table

log = logging.getLogger(__name__)

MODEL_VERSION = "2.0"
MODEL_DIR = "models"
MODEL_FILE = "anomaly_model.joblib"
MODEL_META = "anomaly_model.json"

MODEL_FEATURES = SIGNAL_FEATURES
Z_CLIP = 30.0
MIN_FIT_STEPS = 32  # fewer judged steps than this: no forest (the rules decide alone)
FIT_SAMPLE = 200_000  # ordinary steps the forest is fitted on, at most
# The opening steps of a run that starts off are a transient: the model does not call them `other`
# (the rules still judge them).
OPENING_STEPS, OPENING_SHARE = 10, 0.05
CHUNK_STEPS = 200_000  # steps read and scored at a time (their signals in smaller chunks: signals.CHUNK_ROWS)

DEFAULT_THRESHOLDS = {
    # a step no rule names is anomalous (class "other") when the forest scores it past this (ordinary
    # steps score about 0.4: their signal summary sits at the fleet's median, floored there) ...
    "other_score": 0.62,
    # ... on at least this many consecutive steps, and some signal's 3-step |z| is past MOVED_Z
    "other_steps": 2,
    # an attribute rule flags alone when this many times past its threshold ...
    "strong": 2.0,
    # ... or with its feature's 3-step median past this fraction of the threshold
    "sustained": 1.0,
    # an attribute rule's feature's 3-step median must be past this fraction of the threshold too
    "gated_sustained": 0.75,
    # hysteresis: a flagged episode grows over neighbouring steps whose class feature is past
    # this fraction of the rule threshold
    "loose": 0.5,
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
        ("drivers", pa.string()),
    ]
)


@dataclass
class AnomalyModelConfig:
    """Isolation-forest settings, recorded with the model.

    n_estimators: trees (100 score a million steps in about 10 s; 200 decided no step differently).
    contamination: share of the fleet's ordinary steps (those no rule flags) the forest ranks as
        unusual; a rule's hit counts only on such a step (the model's gate on the rules).
    max_samples: steps drawn per tree.
    random_state: fixed, so a refit on the same fleet gives the same model.
    thresholds: decision thresholds (see DEFAULT_THRESHOLDS).
    """

    n_estimators: int = 100
    contamination: float = 0.1
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
    """The forest with what it was fitted with: its input floor, gate, typical score, thresholds, fleet baseline."""

    forest: IsolationForest | None
    features: tuple[str, ...]
    floor: np.ndarray
    gate: float
    typical_score: float
    thresholds: dict
    fleet_baseline: pd.DataFrame | None = None

    def scores(self, features: pd.DataFrame) -> np.ndarray:
        """Anomaly score of each row (higher = more unusual); NaN without a forest."""
        if self.forest is None:
            return np.full(len(features), np.nan)
        return -self.forest.score_samples(model_matrix(features, self.features, self.floor))


def model_matrix(features: pd.DataFrame, names: tuple[str, ...] = MODEL_FEATURES,
                 floor: np.ndarray | None = None) -> np.ndarray:
    """The forest's input: log(1 + the signal summary), clipped, missing as 0, floored at `floor`.

    The log keeps a handful of huge deviations in the fleet from stretching the range a tree splits
    over; the floor (the fleet's medians) makes only excess deviation count, so an unusually quiet
    step is not unusual.
    """
    cols = [features[c].to_numpy(dtype=float) if c in features else np.zeros(len(features)) for c in names]
    x = np.column_stack(cols) if cols else np.zeros((len(features), 0))
    x = np.log1p(np.clip(np.nan_to_num(x, nan=0.0, posinf=Z_CLIP), 0.0, Z_CLIP))
    return x if floor is None else np.maximum(x, floor)


def _judged(features: pd.DataFrame) -> np.ndarray:
    """Steps with at least one signal that has a baseline (the model can judge them)."""
    return features["sig_keys"].to_numpy(dtype=float) > 0 if "sig_keys" in features else np.zeros(len(features), bool)


def fit_model(features: pd.DataFrame, config: AnomalyModelConfig | None = None,
              rules: tuple[Rule, ...] | None = None) -> FittedModel:
    """Fit the isolation forest on the fleet's ordinary steps (pure: no files).

    Ordinary: judged (`_judged`) and no rule fires. The forest learns what those steps' signal
    summaries look like; the gate is the score its `contamination` share of them passes.
    """
    config = config or AnomalyModelConfig()
    th = dict(DEFAULT_THRESHOLDS) | dict(config.thresholds)
    hits, _ = apply_rules(features, rules or load_rules())
    judged = _judged(features)
    ordinary = judged & ~hits.to_numpy().any(axis=1)
    train = ordinary if ordinary.sum() >= MIN_FIT_STEPS else judged
    if train.sum() < MIN_FIT_STEPS:
        return FittedModel(None, MODEL_FEATURES, np.zeros(len(MODEL_FEATURES)), np.nan, np.nan, th)
    x = model_matrix(features[train], MODEL_FEATURES)
    if len(x) > FIT_SAMPLE:
        # each tree draws max_samples steps anyway; the sample settles the floor, gate and typical score
        x = x[np.random.default_rng(config.random_state).choice(len(x), FIT_SAMPLE, replace=False)]
    floor = np.median(x, axis=0)
    x = np.maximum(x, floor)
    forest = IsolationForest(
        n_estimators=config.n_estimators,
        contamination=config.contamination,
        max_samples=min(config.max_samples, len(x)),
        random_state=config.random_state,
    ).fit(x)
    scores = -forest.score_samples(x)
    return FittedModel(forest, MODEL_FEATURES, floor, float(-forest.offset_), float(np.median(scores)), th)


def _opening(runs: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """Rows in the opening transient of a run that starts off: its first max(OPENING_STEPS,
    OPENING_SHARE of its rows) rows, when some signal is already past its noise (`moved`) in its first
    three rows. Training's opening is a transient (the critic warms up, the first validations precede
    learning) that is off from the first step and settles; a run that starts in line has no such
    excuse for what comes next."""
    new = np.r_[True, runs[1:] != runs[:-1]]
    starts = np.flatnonzero(new)
    sizes = np.diff(np.r_[starts, len(runs)])
    position = np.arange(len(runs)) - np.repeat(starts, sizes)
    starts_off = np.bincount(np.repeat(np.arange(len(starts)), sizes), weights=(moved & (position < 3)).astype(float),
                             minlength=len(starts)) > 0
    window = np.maximum(OPENING_STEPS, OPENING_SHARE * sizes)
    return np.repeat(starts_off, sizes) & (position < np.repeat(window, sizes))


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


def _stretches(runs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, the length of the stretch of consecutive `mask` rows of its run it belongs to (0 outside)."""
    ids = _stretch_ids(runs, mask)
    return np.where(mask, np.bincount(ids)[ids], 0)


# The signal families (signals.FAMILIES) each named class shows in.
CLASS_FAMILIES = {
    "gen_slowdown": ("timing",), "old_log_prob_slowdown": ("timing",), "update_actor_slowdown": ("timing",),
    "kl_spike": ("policy",), "grad_explosion": ("policy",), "nan_loss": ("policy", "critic"),
    "memory_pressure": ("memory",), "entropy_collapse": ("policy",),
    "response_length_collapse": ("response", "batch", "timing"), "reward_collapse": ("reward", "advantage", "critic"),
}


def _same_event(features: pd.DataFrame, runs: np.ndarray, flagged: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """`other` rows of a stretch right next to a named episode whose signal family at the stretch's
    peak (largest `sig_top`) is one that episode's class shows in."""
    other = flagged & (cls == "other")
    out = np.zeros(len(cls), bool)
    if not other.any() or "sig_family" not in features:
        return out
    family = features["sig_family"].to_numpy()
    top = features["sig_top"].to_numpy(dtype=float)
    stretch = _stretch_ids(runs, other)
    peak_family = pd.Series(top[other], index=np.flatnonzero(other)).groupby(stretch[other]).idxmax()
    stretch_family = np.full(stretch.max() + 1, "", dtype=object)
    stretch_family[peak_family.index] = family[peak_family.to_numpy()]
    for name, families in CLASS_FAMILIES.items():
        named = flagged & (cls == name)
        if named.any():
            touching = _grow(runs, named, other) & other
            out |= touching & np.isin(stretch_family[stretch], families)
    return out


def _stretch_ids(runs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A number per stretch of consecutive `mask` rows of one run (0 outside)."""
    new_run = np.r_[True, runs[1:] != runs[:-1]]
    prev = np.r_[False, mask[:-1]]
    return np.where(mask, np.cumsum(mask & (new_run | ~prev)), 0)


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
    """The 3-step centred median of a z feature (`zs_...`), if there is one."""
    name = "zs_" + feature[2:] if feature.startswith("z_") else None
    return features[name].to_numpy(dtype=float) if name in features else None


def _strong_hits(features: pd.DataFrame, hits: pd.DataFrame, strength: pd.DataFrame, rules,
                 strong: float, sustained: float) -> np.ndarray:
    """Attribute-rule hits `strong` x past their threshold, or whose feature's 3-step median is past
    `sustained` x the threshold."""
    out = np.zeros(len(features), bool)
    for r in rules:
        fired = hits[r.name].to_numpy()
        out |= fired & (strength[r.name].to_numpy() >= strong)
        f, op, v = r.when[0]
        smooth = _smoothed(features, f)
        if smooth is not None:
            with np.errstate(invalid="ignore"):
                out |= fired & OPS[op](smooth, v * sustained)
    return out


def decide(
    features: pd.DataFrame,
    model: FittedModel | None = None,
    rules: tuple[Rule, ...] | None = None,
    thresholds: dict | None = None,
    use_model: bool = True,
    use_rules: bool = True,
) -> pd.DataFrame:
    """The final decision per step: is_anomaly, score, anomaly_class and the rules that fired.

    A "flag" rule (a literal, absolute threshold: NaN, KL, memory share, clip fraction) flags alone.
    An "attribute" rule (a change against the run's own noise) counts only when the change lasts (its
    feature's 3-step median past `gated_sustained` x the threshold: a one-step blip is the tail of the
    run's noise); it then flags alone when strong or sustained (`strong`, `sustained`), and a weaker
    hit only where the forest's gate agrees the step is unusual, so the gate cuts rule false alarms. A step no rule fires on is flagged as class `other` when the
    forest scores it past `other_score` on at least `other_steps` consecutive steps, some signal
    moved past its noise, and the step is past the run's opening transient when it has one (`_opening`). Flagged stretches then grow over neighbouring steps where the same class's
    feature's 3-step median stays past `loose` x its threshold (hysteresis). A step's class is its strongest rule's;
    consecutive flagged steps of one class form an episode. `use_model=False` leaves the forest out
    (rules alone), `use_rules=False` the rules (the forest alone, every flag `other`).
    """
    rules = (rules or load_rules()) if use_rules else ()
    th = dict(DEFAULT_THRESHOLDS)
    if model is not None:
        th.update(model.thresholds)
    th.update(thresholds or {})
    n = len(features)
    runs = features["run_id"].to_numpy()
    steps = features["step"].to_numpy()
    hits, strength = apply_rules(features, rules) if rules else (pd.DataFrame(index=features.index),) * 2
    classes = sorted({r.anomaly_class for r in rules})
    cls_score = _class_matrix(hits, strength, rules, classes) if rules else np.zeros((n, 0))

    flag_rules = [r for r in rules if r.mode == "flag"]
    attr_rules = [r for r in rules if r.mode == "attribute"]
    flag_hit = hits[[r.name for r in flag_rules]].to_numpy().any(axis=1) if flag_rules else np.zeros(n, bool)
    attr_hit = hits[[r.name for r in attr_rules]].to_numpy().any(axis=1) if attr_rules else np.zeros(n, bool)
    # a hit must last (its feature's 3-step median past a share of the threshold): a one-step blip is
    # the tail of the run's own noise
    attr_lasting = _strong_hits(features, hits, strength, attr_rules, np.inf, th["gated_sustained"])
    attr_strong = _strong_hits(features, hits, strength, attr_rules, th["strong"], th["sustained"]) & attr_lasting

    forest = model is not None and model.forest is not None and use_model
    score = model.scores(features) if forest else np.full(n, np.nan)
    judged = _judged(features) & forest
    with np.errstate(invalid="ignore"):
        gate = score > model.gate if forest else np.zeros(n, bool)
        moved = features["sig_top"].to_numpy(dtype=float) > th.get("other_evidence", MOVED_Z) if "sig_top" in features else np.zeros(n, bool)
        candidate = judged & moved & (score > th["other_score"]) & ~flag_hit & ~attr_hit & ~_opening(runs, moved)
    other = _stretches(runs, candidate) >= th["other_steps"]

    seed_flag = flag_hit | attr_strong | (attr_hit & judged & gate & attr_lasting)
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
            zs = _smoothed(features, f)
            zs = features[f].to_numpy(dtype=float) if zs is None else zs
            with np.errstate(invalid="ignore"):
                loose |= OPS[op](zs, v * th["loose"])
        grown = _grow(runs, seed, loose) & ~flagged
        final_cls = np.where(grown, cls, final_cls)
        flagged |= grown

    # a model-only stretch that touches a named episode and moves the signals that class reads is that
    # event's run-up or recovery, not another anomaly
    flagged &= ~_same_event(features, runs, flagged, final_cls)
    final_cls = np.where(flagged, final_cls, None)
    # a step's class is its strongest rule's class; steps no rule names (grown, model-only) keep
    # the class they were given; a lone step between two steps of one class takes that class
    named = flagged & (cls_score.max(axis=1) > 0) if classes else np.zeros(n, bool)
    final_cls = np.where(named, step_cls, final_cls)
    final_cls = np.where(flagged, final_cls, None)
    same_run = np.r_[False, runs[1:] == runs[:-1]] & np.r_[runs[:-1] == runs[1:], False]
    prev_cls = np.r_[None, final_cls[:-1]]
    next_cls = np.r_[final_cls[1:], None]
    lone = flagged & same_run & (prev_cls == next_cls) & (prev_cls != final_cls) & (prev_cls != None)  # noqa: E711
    final_cls = np.where(lone, prev_cls, final_cls)
    ep_id, first, last = episodes(runs, steps, flagged, final_cls)

    fired_names = np.array([r.name for r in rules], dtype=object)
    hit_mat = hits.to_numpy() if rules else np.zeros((n, 0), bool)
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
    metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """step_anomalies rows (with run_id) for the steps of `phases`: pure, no files.

    `metrics` are the runs' step_metrics rows (every key they logged), which the model reads;
    without them, or without a model, the rules and hysteresis decide alone and `score` is NaN.
    An `other` episode's explanation and `drivers` (JSON) come from its peak step (drivers.py);
    a named class's explanation cites its own channels. Whole runs of about CHUNK_STEPS steps are
    scored at a time.
    """
    chunks = _chunks(phases) if len(phases) else [[]]
    if len(chunks) > 1:
        parts = [score_frame(_part(phases, ids), _part(health, ids), model, fleet_baseline, thresholds,
                             None if metrics is None else _part(metrics, ids)) for ids in chunks]
        return pd.concat(parts, ignore_index=True)
    raw = merge_steps(phases, health)
    summary, signals = (None, None) if metrics is None else signal_summary(metrics, raw[["run_id", "step"]],
                                                                           keep_moved=True)
    features = features_of(raw, fleet_baseline, summary)
    result = decide(features, model, thresholds=thresholds)
    if "reward_mean" in raw and "score_mean" in raw:
        raw["reward_mean"] = raw["reward_mean"].fillna(raw["score_mean"])
    elif "score_mean" in raw:
        raw["reward_mean"] = raw["score_mean"]
    flagged = result["is_anomaly"].to_numpy()
    result["explanation"] = explain_steps(features, raw, flagged, result["anomaly_class"].to_numpy())
    result["drivers"] = None
    texts, payloads = episode_explanations(model, signals, result)
    if texts:
        key = pd.Series(list(zip(result["run_id"], result["episode_id"], strict=True)), index=result.index)
        other = flagged & (result["anomaly_class"] == "other").to_numpy()
        result.loc[other, "explanation"] = key[other].map(texts)
        result.loc[other, "drivers"] = key[other].map(payloads)
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


def _chunks(phases: pd.DataFrame) -> list[list[str]]:
    """Run ids in groups of about CHUNK_STEPS steps (a run is never split)."""
    sizes = phases.groupby("run_id", sort=True).size()
    chunks, current, total = [], [], 0
    for rid, n in sizes.items():
        if current and total + n > CHUNK_STEPS:
            chunks.append(current)
            current, total = [], 0
        current.append(rid)
        total += int(n)
    return chunks + ([current] if current else [])


def _part(frame: pd.DataFrame, run_ids: list[str]) -> pd.DataFrame:
    """The rows of `frame` of the runs `run_ids`."""
    return frame[frame["run_id"].isin(run_ids)] if not frame.empty else frame


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
    table = group_medians(phases, runs_df)
    baseline = fleet_baseline_for(sorted(phases["run_id"].unique()), runs_df, table)
    parts = []
    for ids in _chunks(phases):
        parts.append(build_features(_part(phases, ids), _part(health, ids), baseline, read_metrics(con, ids)))
    con.close()
    features = pd.concat(parts, ignore_index=True)
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
        "gate_score": fitted.gate,
        "typical_score": fitted.typical_score,
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
    runs_df = _read_runs(con)
    baseline = None
    if model is not None and model.fleet_baseline is not None:
        baseline = fleet_baseline_for(run_ids, runs_df if not runs_df.empty else None, model.fleet_baseline)
    flagged = 0
    scored = set()
    for ids in _chunks(phases) if not phases.empty else []:
        part_health = _part(health, ids) if not health.empty else _part(phases, ids)[["run_id", "step"]]
        result = score_frame(_part(phases, ids), part_health, model, baseline, metrics=read_metrics(con, ids))
        _write_partitions(warehouse, result, ids)
        flagged += int(result["is_anomaly"].sum())
        scored.update(ids)
    con.close()
    empty = pd.DataFrame(columns=["run_id"] + STEP_ANOMALIES_SCHEMA.names)
    _write_partitions(warehouse, empty, [rid for rid in run_ids if rid not in scored])
    return flagged
