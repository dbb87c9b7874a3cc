"""Why the model flagged an episode no rule names: which signals drove its score at the episode's peak.

The model's own answer, by occlusion: each signal family in turn is put back at its baseline
(its z set to 0) and the step is scored again; the drop in score is that family's contribution.
Families, not single keys, are occluded because verl logs many near-copies (a length's max and
the same max among non-aborted responses): putting back one copy would leave the other standing
and credit neither. Within a family, the keys that moved most are cited with their value and
the run's baseline.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from pipeline.detect.peaks import move_phrase
from pipeline.detect.signals import FAMILY_NAMES, MOVED_Z, step_summary

TOP_FAMILIES = 3
KEYS_PER_FAMILY = 2
MIN_CONTRIBUTION = 0.01  # a family after the first is cited only when it moves the score this much


def _describe(key: dict) -> str:
    """A cited key at its extreme in the episode: value, step, against the run's baseline there, z."""
    move = move_phrase(key["value"], key["baseline"], "the run's baseline")
    sep = " " if move.startswith("(") else ", "
    return f"{key['key']} {key['value']:.4g} at step {key['step']}{sep}{move} (z {key['z']:+.1f})"


def step_drivers(model, rows: pd.DataFrame) -> list[dict]:
    """The families that drove the model's score of one step, largest contribution first.

    `rows` are the step's `signal_z` rows (every key). Each entry: family, contribution (score
    drop when the family is put back at its baseline), and its most moved keys (key, value,
    baseline, z).
    """
    rows = rows[np.isfinite(rows["z"].to_numpy(dtype=float))]
    if rows.empty or model is None or model.forest is None:
        return []
    family = pd.Categorical(rows["family"], categories=FAMILY_NAMES).codes.astype(np.int64)
    present = np.unique(family)
    z = rows["z"].to_numpy(dtype=float)
    zs = np.nan_to_num(rows["zs"].to_numpy(dtype=float))
    # variant 0 is the step as it is; variant k+1 has family present[k] at its baseline
    variants = len(present) + 1
    occluded = np.repeat(np.r_[-1, present], len(rows))
    fam_all = np.tile(family, variants)
    summary = step_summary(np.repeat(np.arange(variants), len(rows)), fam_all,
                           np.where(fam_all == occluded, 0.0, np.tile(z, variants)),
                           np.where(fam_all == occluded, 0.0, np.tile(zs, variants)), variants)
    scores = model.scores(pd.DataFrame(summary[:, : len(model.features)], columns=list(model.features)))
    out = []
    for k in np.argsort(scores[1:] - scores[0])[:TOP_FAMILIES]:
        contribution = float(scores[0] - scores[1 + k])
        if contribution <= 0 or (out and contribution < MIN_CONTRIBUTION):
            break
        fam_rows = rows[family == present[k]]
        moved = np.abs(np.nan_to_num(fam_rows["zs"].to_numpy(dtype=float)))
        order = np.argsort(-moved)[:KEYS_PER_FAMILY]
        # the family's most moved key always; a second one only when it moved past its noise too
        top = fam_rows.iloc[order[(np.arange(len(order)) == 0) | (moved[order] > MOVED_Z)]]
        out.append({
            "family": FAMILY_NAMES[present[k]],
            "contribution": round(contribution, 4),
            "keys": [{"key": str(r.key), "value": float(r.value), "baseline": float(r.baseline), "z": round(float(r.z), 2),
                      "step": int(r.step)}
                     for r in top.itertuples()],
        })
    return out


def drivers_text(drivers: list[dict], score: float, typical: float, step: int) -> str:
    """The explanation of an `other` episode: its peak score and what drove it."""
    head = f"model score {score:.2f} at step {step} (ordinary steps score about {typical:.2f})"
    if not drivers:
        return head + "; no single signal family explains it"
    parts = []
    for d in drivers:
        keys = ", ".join(_describe(k) for k in d["keys"])
        parts.append(f"{d['family']} signals (-{d['contribution']:.2f} without them): {keys}")
    return head + "; " + "; ".join(parts)


def episode_explanations(model, signals: pd.DataFrame, result: pd.DataFrame) -> tuple[dict, dict]:
    """For each `other` episode of `result` (decide's output with run_id, step, score, episode_id):
    (explanation text, drivers JSON) keyed by (run_id, episode_id). The families come from the
    episode's peak step (highest score); each cited key is quoted at its own extreme in the episode
    (`at_extreme`)."""
    texts, payloads = {}, {}
    other = result[result["is_anomaly"].to_numpy(dtype=bool) & (result["anomaly_class"] == "other")]
    if other.empty or signals is None or signals.empty:
        return texts, payloads
    peaks = other.loc[other.groupby(["run_id", "episode_id"])["score"].idxmax()]
    wanted = pd.MultiIndex.from_frame(other[["run_id", "step"]].astype({"run_id": str, "step": "int64"}))
    at = pd.MultiIndex.from_arrays([signals["run_id"].astype(str), signals["step"].astype("int64")])
    rows = signals[at.isin(wanted)]
    episode = pd.Series(other["episode_id"].to_numpy(), index=wanted).reindex(at[at.isin(wanted)]).to_numpy()
    by_episode = {k: g for k, g in rows.groupby([rows["run_id"].astype(str).to_numpy(), episode], observed=True)}
    for peak in peaks.itertuples():
        mine = by_episode.get((str(peak.run_id), peak.episode_id), rows.iloc[:0])
        drivers = at_extreme(step_drivers(model, mine[mine["step"] == peak.step]), mine)
        key = (peak.run_id, peak.episode_id)
        texts[key] = drivers_text(drivers, float(peak.score), model.typical_score, int(peak.step))
        payloads[key] = json.dumps(drivers)
    return texts, payloads


def at_extreme(drivers: list[dict], rows: pd.DataFrame) -> list[dict]:
    """`drivers` with each key's value, baseline and z taken at the step of the episode (`rows`: its
    signal_z rows) where the key is furthest from the run's baseline the way it moved at the peak, in
    its own units (z is clipped, and several steps of a large move would tie), and that step."""
    for d in drivers:
        for k in d["keys"]:
            series = rows[rows["key"] == k["key"]]
            away = (series["value"] - series["baseline"]).to_numpy(dtype=float) * (1.0 if k["z"] >= 0 else -1.0)
            if np.isfinite(away).any():
                best = series.iloc[int(np.nanargmax(away))]
                k.update(value=float(best["value"]), baseline=float(best["baseline"]), z=round(float(best["z"]), 2),
                         step=int(best["step"]))
    return drivers
