"""The fleet's model of normal steps: an isolation forest over the per-step summary of every signal."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pipeline.detect.forest import ForestArrays
from pipeline.detect.rules import Rule, apply_rules, load_rules
from pipeline.detect.signals import SIGNAL_FEATURES

MODEL_VERSION = "2.1"
MODEL_FEATURES = SIGNAL_FEATURES
Z_CLIP = 30.0
MIN_FIT_STEPS = 32  # fewer judged steps than this: no forest (the rules decide alone)
FIT_SAMPLE = 200_000  # ordinary steps the forest is fitted on, at most

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
class FittedModel:
    """The forest (as arrays: scoring needs no scikit-learn) with what it was fitted with: its input floor, gate,
    typical score, thresholds, fleet baseline."""

    forest: ForestArrays | None
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


def judged_steps(features: pd.DataFrame) -> np.ndarray:
    """Steps with at least one signal that has a baseline (the model can judge them)."""
    return features["sig_keys"].to_numpy(dtype=float) > 0 if "sig_keys" in features else np.zeros(len(features), bool)


def training_rows(features: pd.DataFrame, rules: tuple[Rule, ...] | None = None) -> pd.DataFrame:
    """What the fit reads of each step: its model input (`model_matrix`, unfloored), whether it is judged
    (`judged_steps`) and whether it is ordinary (judged, and no rule fires). A few numbers a step, so that a
    fleet's steps can be gathered chunk by chunk and fitted on at once."""
    hits, _ = apply_rules(features, rules or load_rules())
    judged = judged_steps(features)
    rows = pd.DataFrame(model_matrix(features, MODEL_FEATURES), columns=list(MODEL_FEATURES))
    rows["judged"] = judged
    rows["ordinary"] = judged & ~hits.to_numpy().any(axis=1)
    return rows


def fit_model(features: pd.DataFrame, config: AnomalyModelConfig | None = None,
              rules: tuple[Rule, ...] | None = None) -> FittedModel:
    """Fit the isolation forest on the fleet's ordinary steps (pure: no files); see `fit_training_rows`."""
    return fit_training_rows(training_rows(features, rules), config)


def fit_training_rows(rows: pd.DataFrame, config: AnomalyModelConfig | None = None) -> FittedModel:
    """Fit the isolation forest on the ordinary steps of `rows` (`training_rows` of the fleet's steps).

    The forest learns what those steps' signal summaries look like; the gate is the score its
    `contamination` share of them passes. With too few ordinary steps it learns from every judged one.
    """
    config = config or AnomalyModelConfig()
    th = dict(DEFAULT_THRESHOLDS) | dict(config.thresholds)
    judged, ordinary = rows["judged"].to_numpy(dtype=bool), rows["ordinary"].to_numpy(dtype=bool)
    train = ordinary if ordinary.sum() >= MIN_FIT_STEPS else judged
    if train.sum() < MIN_FIT_STEPS:
        return FittedModel(None, MODEL_FEATURES, np.zeros(len(MODEL_FEATURES)), np.nan, np.nan, th)
    x = rows.loc[train, list(MODEL_FEATURES)].to_numpy(dtype=float)
    if len(x) > FIT_SAMPLE:
        # each tree draws max_samples steps anyway; the sample settles the floor, gate and typical score
        x = x[np.random.default_rng(config.random_state).choice(len(x), FIT_SAMPLE, replace=False)]
    floor = np.median(x, axis=0)
    x = np.maximum(x, floor)
    # fitted as "auto", which leaves the training steps unscored: with a share, sklearn's fit scores them
    # for its offset and the typical score needs them again; scored once here, the gate is sklearn's offset
    from sklearn.ensemble import IsolationForest

    forest = IsolationForest(
        n_estimators=config.n_estimators,
        contamination="auto",
        max_samples=min(config.max_samples, len(x)),
        random_state=config.random_state,
    ).fit(x)
    arrays = ForestArrays.of(forest)
    scores = arrays.score_samples(x)
    offset = np.percentile(scores, 100.0 * config.contamination)
    return FittedModel(arrays, MODEL_FEATURES, floor, float(-offset), float(np.median(-scores)), th)
