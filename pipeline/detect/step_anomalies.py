"""step_anomalies rows of a frame of steps: features, the decision and explanations (pure, no files)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.detect.decide import decide
from pipeline.detect.drivers import episode_explanations
from pipeline.detect.explain import explain_steps
from pipeline.detect.features import features_of, merge_steps
from pipeline.detect.model import FittedModel
from pipeline.detect.peaks import named_episode_texts
from pipeline.detect.signals import signal_summary

CHUNK_STEPS = 5_000  # steps read and scored at a time (their signals in smaller chunks: signals.CHUNK_ROWS)

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
        ("drivers", pa.string()),
    ]
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
    Every step of an episode carries the episode's explanation, read at its peak: for a named class
    its channel's most extreme value against the run's median (peaks.py), for `other` the model's
    peak step and the signals that drove it (drivers.py, also as JSON in `drivers`). Whole runs of about CHUNK_STEPS steps are
    scored at a time.
    """
    chunks = run_chunks(phases) if len(phases) else [[]]
    if len(chunks) > 1:
        parts = [score_frame(runs_part(phases, ids), runs_part(health, ids), model, fleet_baseline, thresholds,
                             None if metrics is None else runs_part(metrics, ids)) for ids in chunks]
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
    named = flagged & (result["anomaly_class"] != "other").to_numpy()
    result["explanation"] = explain_steps(features, raw, flagged, result["anomaly_class"].to_numpy())
    result["drivers"] = None
    _by_episode(result, "explanation", named, named_episode_texts(features, raw, result))
    texts, payloads = episode_explanations(model, signals, result)
    _by_episode(result, "explanation", flagged & ~named, texts)
    _by_episode(result, "drivers", flagged & ~named, payloads)
    result.loc[~result["is_anomaly"], "episode_first_step"] = None
    result.loc[~result["is_anomaly"], "episode_last_step"] = None
    result.loc[~result["is_anomaly"], "episode_id"] = None
    return result


def _by_episode(result: pd.DataFrame, column: str, rows: np.ndarray, values: dict) -> None:
    """Set `column` on `rows` of `result` from `values`, keyed by (run_id, episode_id)."""
    if not values or not rows.any():
        return
    key = pd.Series(list(zip(result["run_id"].to_numpy()[rows], result["episode_id"].to_numpy()[rows], strict=True)),
                    index=result.index[rows])
    result.loc[rows, column] = key.map(values)


def run_chunks(phases: pd.DataFrame) -> list[list[str]]:
    """Run ids in groups of about CHUNK_STEPS steps (a run is never split)."""
    return chunks_of(phases.groupby("run_id", sort=True).size())


def chunks_of(sizes: pd.Series) -> list[list[str]]:
    """The run ids of `sizes` (steps per run, index run_id, in order) in groups of about CHUNK_STEPS steps."""
    chunks, current, total = [], [], 0
    for rid, n in sizes.items():
        if current and total + n > CHUNK_STEPS:
            chunks.append(current)
            current, total = [], 0
        current.append(rid)
        total += int(n)
    return chunks + ([current] if current else [])


def runs_part(frame: pd.DataFrame, run_ids: list[str]) -> pd.DataFrame:
    """The rows of `frame` of the runs `run_ids`."""
    return frame[frame["run_id"].isin(run_ids)] if not frame.empty else frame
