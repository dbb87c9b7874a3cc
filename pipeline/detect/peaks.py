"""A named episode's peak: the step where its class's signal is most extreme against the run's own
median, worded as the chart shows it ("grad_norm 41.3 at step 21, 490x the run's median 0.084").

The run's median is taken over the run's unflagged steps, so the episode is not part of its own
reference. Ratios are quoted only for positive quantities (times, norms, lengths, memory), where a
ratio means something; signed or bounded ones (KL, reward) are quoted next to the median.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.detect.explain import NOTHING_CITED, explain_steps
from pipeline.detect.features import LOG_CHANNELS, PHASE_TIMES
from pipeline.vocabulary import ANOMALIES

# The signal that shows each named class, and the way it moves (+1 up, -1 down) (pipeline/vocabulary.py).
PEAK_CHANNEL = {a.name: a.peak for a in ANOMALIES if a.peak}
UNITS = {c: " s" for c in (*PHASE_TIMES, "step_time")} | {"mem_reserved_gb": " GB", "mem_allocated_gb": " GB"}
NEAR = 1.5  # a ratio within NEAR of 1 (either way) reads as a percentage, beyond it as a multiple


def move_phrase(value: float, reference: float, what: str, ratio: bool = True, unit: str = "") -> str:
    """How `value` stands against `reference` (`what` names it): "490x the run's median 0.084", "94% below
    ...", "+40% on ...", or, without a meaningful ratio (`ratio` False, or either not positive),
    "(the run's median 0.61)"."""
    ref = f"{what} {reference:.4g}{unit}"
    if not (ratio and value > 0 and reference > 0):
        return f"({ref})"
    r = value / reference
    if r >= NEAR:
        return f"{r:.3g}x {ref}"
    if r <= 1 / NEAR:
        return f"{100 * (1 - r):.0f}% below {ref}"
    return f"{100 * (r - 1):+.0f}% on {ref}"


def peak_rows(raw: pd.DataFrame, result: pd.DataFrame) -> pd.DataFrame:
    """One row per named episode of `result` (decide's output, same index as `raw`): run_id, episode_id,
    class, the position of its peak in `raw`, the channel, its value there and the run's median.

    The peak is the flagged step whose class channel is highest (lowest for a falling one); for a class
    without a channel (nan_loss), or a channel the run does not log, it is the episode's first step.
    """
    flagged = result["is_anomaly"].to_numpy(dtype=bool)
    cls = result["anomaly_class"].to_numpy()
    named = flagged & np.isin(cls, [c for c in np.unique(cls[flagged].astype(str)) if c != "other"])
    out = pd.DataFrame({"run_id": result["run_id"].to_numpy()[named], "episode_id": result["episode_id"].to_numpy()[named],
                        "cls": cls[named], "row": np.flatnonzero(named)})
    out["channel"], out["value"], out["median"], out["badness"] = None, np.nan, np.nan, -np.inf
    for name, (channel, direction) in PEAK_CHANNEL.items():
        mine = (out["cls"] == name).to_numpy()
        if not mine.any() or channel not in raw:
            continue
        x = raw[channel].to_numpy(dtype=float)
        median = pd.Series(np.where(flagged, np.nan, x)).groupby(result["run_id"].to_numpy()).median()
        values = x[out.loc[mine, "row"].to_numpy()]
        out.loc[mine, "channel"] = channel
        out.loc[mine, "value"] = values
        out.loc[mine, "median"] = out.loc[mine, "run_id"].map(median).to_numpy(dtype=float)
        out.loc[mine, "badness"] = np.where(np.isfinite(values), direction * values, -np.inf)
    # the first row of each episode wins ties (and is the peak where nothing is finite)
    peaks = out.groupby(["run_id", "episode_id"], sort=False)["badness"].idxmax()
    return out.loc[peaks.to_numpy()].reset_index(drop=True)


def peak_text(channel: str, value: float, median: float, step: int) -> str:
    """The head of a named episode's explanation: its channel's value at the peak against the run's median."""
    unit = UNITS.get(channel, "")
    head = f"{channel} {value:.3g}{unit} at step {step}"
    if not np.isfinite(median):
        return head
    move = move_phrase(value, median, "the run's median", channel in LOG_CHANNELS, unit)
    return f"{head} {move}" if move.startswith("(") else f"{head}, {move}"


def named_episode_texts(features: pd.DataFrame, raw: pd.DataFrame, result: pd.DataFrame) -> dict:
    """The explanation of each named episode of `result`, keyed by (run_id, episode_id): its peak
    (`peak_text`), then what else moved at that step (`explain.explain_steps`, two parts at most)."""
    peaks = peak_rows(raw, result)
    if peaks.empty:
        return {}
    rows = peaks["row"].to_numpy()
    steps = result["step"].to_numpy()[rows]
    rest = explain_steps(features.iloc[rows], raw.iloc[rows], np.ones(len(rows), bool), peaks["cls"].to_numpy(),
                         top=2, lead_cited=True)
    texts = {}
    for p, step, more in zip(peaks.itertuples(), steps, rest, strict=True):
        if p.channel is None or not np.isfinite(p.value):
            texts[(p.run_id, p.episode_id)] = f"step {step}: {more}"
        else:
            head = peak_text(p.channel, p.value, p.median, int(step))
            texts[(p.run_id, p.episode_id)] = head if more == NOTHING_CITED else f"{head}; {more}"
    return texts
