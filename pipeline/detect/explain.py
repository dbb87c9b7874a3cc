"""Explanations of flagged steps, and episodes of consecutive flags (their advice is run_advice, sql/run_advice.sql)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.detect.features import ASINH_CHANNELS, FALLING, LINEAR_CHANNELS, LOG_CHANNELS
from pipeline.vocabulary import ANOMALIES

# Channels an explanation may cite; memory share and clip fraction read better as absolute values.
EXPLAIN_CHANNELS = LOG_CHANNELS + ASINH_CHANNELS + ("reward_mean",)


def _describe(channel: str, value: float, base: float, ratio: float) -> str:
    if channel in LOG_CHANNELS:
        if ratio < 1.5:
            return f"{channel} {100 * (ratio - 1):+.0f}%"
        return f"{channel} {ratio:.1f}x the run's baseline"
    if channel in ASINH_CHANNELS or channel in LINEAR_CHANNELS:
        return f"{channel} {value:.3g} (baseline {base:.3g})"
    return f"{channel} {value:.3g}"


# The channels that show each class, cited first in its explanation (pipeline/vocabulary.py).
CLASS_CHANNELS = {a.name: a.channels for a in ANOMALIES if a.channels}
NOTHING_CITED = "unusual combination of metrics (model score)"
CITE_Z = 4.0  # other channels are cited when this far from their baseline, the bad way
BAD_SIGN = {c: -1.0 if c in FALLING or c == "throughput" else 1.0 for c in EXPLAIN_CHANNELS}


def explain_steps(
    features: pd.DataFrame, raw: pd.DataFrame, flagged: np.ndarray, classes: np.ndarray, top: int = 3,
    lead_cited: bool = False,
) -> np.ndarray:
    """A sentence per flagged step naming the features that moved and by how much; None elsewhere.

    The step's class's own channels come first, then any other channel past CITE_Z, largest
    first. `raw` holds the untransformed channel values aligned with `features` (same rows).
    With `lead_cited` the class's first channel is left out (the episode's peak cites it).
    """
    out = np.full(len(features), None, dtype=object)
    idx = np.flatnonzero(flagged)
    if idx.size == 0:
        return out
    col = {c: j for j, c in enumerate(EXPLAIN_CHANNELS)}
    signs = np.array([BAD_SIGN[c] for c in EXPLAIN_CHANNELS])
    zmat = np.nan_to_num(features[[f"z_{c}" for c in EXPLAIN_CHANNELS]].to_numpy()[idx], nan=0.0) * signs
    order = np.argsort(-zmat, axis=1)
    nonfinite = features["nonfinite"].to_numpy()[idx]
    mem = features["mem_fraction"].to_numpy()[idx]
    clip = features["pg_clipfrac"].to_numpy()[idx]
    raw_vals = {c: raw[c].to_numpy()[idx] if c in raw else np.full(idx.size, np.nan) for c in EXPLAIN_CHANNELS}
    bases = {c: features[f"base_{c}"].to_numpy()[idx] for c in EXPLAIN_CHANNELS}
    ratios = {c: features[f"{c}_ratio"].to_numpy()[idx] if f"{c}_ratio" in features else np.full(idx.size, np.nan)
              for c in EXPLAIN_CHANNELS}
    fleet = {c: features[f"{c}_vs_fleet"].to_numpy()[idx] for c in EXPLAIN_CHANNELS if f"{c}_vs_fleet" in features}
    for k, row in enumerate(idx):
        parts = []
        if nonfinite[k] > 0:
            parts.append(f"non-finite values in {int(nonfinite[k])} metric(s)")
        own = CLASS_CHANNELS.get(classes[row], ())
        cited = [c for c in own[int(lead_cited):] if np.isfinite(raw_vals[c][k])]
        skip = set(cited) | set(own[:int(lead_cited)])
        cited += [EXPLAIN_CHANNELS[j] for j in order[k] if zmat[k, j] >= CITE_Z and EXPLAIN_CHANNELS[j] not in skip]
        for c in cited[: max(0, top - len(parts))]:
            if np.isfinite(bases[c][k]) and zmat[k, col[c]] != 0:
                parts.append(_describe(c, raw_vals[c][k], bases[c][k], ratios[c][k]))
        for c in CLASS_CHANNELS.get(classes[row], ())[:1]:
            if fleet.get(c) is not None and fleet[c][k] > 1.5:
                parts.append(f"{c} {fleet[c][k]:.1f}x the fleet's median for this config")
        if mem[k] > 0.9:
            parts.append(f"GPU memory {100 * mem[k]:.0f}% used")
        if clip[k] > 0.25:
            parts.append(f"clip fraction {clip[k]:.2f}")
        out[row] = "; ".join(parts) if parts else NOTHING_CITED
    return out


def episodes(runs: np.ndarray, steps: np.ndarray, flagged: np.ndarray, classes: np.ndarray | None = None):
    """Episode id (1.. per run, 0 where unflagged), first and last step of each flagged step's episode.

    Consecutive flagged rows of the same run (and, when `classes` is given, of the same class) form
    one episode; rows must be sorted by run and step.
    """
    n = len(flagged)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = runs[1:] != runs[:-1]
    prev_flag = np.zeros(n, dtype=bool)
    prev_flag[1:] = flagged[:-1]
    new_class = np.zeros(n, dtype=bool)
    if classes is not None:
        new_class[1:] = classes[1:] != classes[:-1]
    start = flagged & (new_run | ~prev_flag | new_class)
    run_start_idx = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))
    starts_cum = np.cumsum(start)
    before_run = np.where(run_start_idx > 0, starts_cum[run_start_idx - 1], 0)
    episode_id = np.where(flagged, starts_cum - before_run, 0)
    global_id = np.where(flagged, starts_cum, 0)
    first = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.int64)
    if flagged.any():
        ids = global_id[flagged]
        s = pd.Series(steps[flagged])
        first[flagged] = s.groupby(ids).transform("min").to_numpy()
        last[flagged] = s.groupby(ids).transform("max").to_numpy()
    return episode_id.astype(np.int64), first, last
