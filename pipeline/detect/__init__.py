"""Detect layer: features, rules, the isolation forest and explanations."""

from pipeline.detect.decide import decide
from pipeline.detect.explain import episodes
from pipeline.detect.features import build_features
from pipeline.detect.model import AnomalyModelConfig, FittedModel, fit_model
from pipeline.detect.rules import apply_rules, load_rules
from pipeline.detect.step_anomalies import score_frame
from pipeline.detect.warehouse import ModelInfo, fit_anomaly_model, load_model, score_runs

__all__ = [
    "AnomalyModelConfig",
    "FittedModel",
    "ModelInfo",
    "apply_rules",
    "build_features",
    "decide",
    "episodes",
    "fit_anomaly_model",
    "fit_model",
    "load_model",
    "load_rules",
    "score_frame",
    "score_runs",
]
