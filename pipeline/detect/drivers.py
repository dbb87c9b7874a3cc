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
from pipeline.detect.signals import FAMILY_NAMES, MOVED_Z, rows_of, step_summary

TOP_FAMILIES = 3
KEYS_PER_FAMILY = 2
MIN_CONTRIBUTION = 0.01  # a family after the first is cited only when it moves the score this much


def _describe(key: dict) -> str:
    """A cited key at its extreme in the episode: value, step, against the run's baseline there, z."""
    move = move_phrase(key["value"], key["baseline"], "the run's baseline")
    sep = " " if move.startswith("(") else ", "
    return f"{key['key']} {key['value']:.4g} at step {key['step']}{sep}{move} (z {key['z']:+.1f})"


def signal_arrays(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """The `signal_z` columns the explanations read, as numpy arrays (key as text, family as its code),
    rows with a finite z only."""
    rows = rows[np.isfinite(rows["z"].to_numpy(dtype=float))]
    return {
        "key": rows["key"].astype(str).to_numpy(),
        "family": pd.Categorical(rows["family"], categories=FAMILY_NAMES).codes.astype(np.int64),
        "value": rows["value"].to_numpy(dtype=float),
        "baseline": rows["baseline"].to_numpy(dtype=float),
        "z": rows["z"].to_numpy(dtype=float),
        "zs": np.nan_to_num(rows["zs"].to_numpy(dtype=float)),
        "step": rows["step"].to_numpy(dtype=np.int64),
    }


def _take(rows: dict, which) -> dict:
    """The rows `which` (a mask or positions) of `signal_arrays` output."""
    return {k: v[which] for k, v in rows.items()}


def peak_drivers(model, peaks: list[dict]) -> list[list[dict]]:
    """For each step of `peaks` (`signal_arrays` of its rows, every key): the families that drove the
    model's score, largest contribution first. Each entry: family, contribution (score drop when the
    family is put back at its baseline), and its most moved keys (key, value, baseline, z, step).
    Every variant of every step is scored in one call of the forest."""
    if model is None or model.forest is None:
        return [[] for _ in peaks]
    parts, first = [], 0
    for rows in peaks:
        parts.append(_variants(rows, first))
        first += parts[-1][-1]
    if first == 0:
        return [[] for _ in peaks]
    columns = [np.concatenate([p[i] for p in parts]) for i in range(4)]
    summary = step_summary(*columns, first)
    scores = model.scores(pd.DataFrame(summary[:, : len(model.features)], columns=list(model.features)))
    out, first = [], 0
    for rows, part in zip(peaks, parts, strict=True):
        out.append(_ranked(rows, scores[first:first + part[-1]]) if part[-1] else [])
        first += part[-1]
    return out


def _variants(rows: dict, first: int):
    """step_summary's input for one step's variants, numbered from `first`: variant 0 is the step as it
    is, variant k+1 has the k-th family present at its baseline (z 0). Also returns how many there are."""
    n = len(rows["z"])
    present = np.unique(rows["family"])
    variants = len(present) + 1 if n else 0
    occluded = np.repeat(np.r_[-1, present], n)
    fam_all = np.tile(rows["family"], variants)
    hidden = fam_all == occluded
    return (first + np.repeat(np.arange(variants), n), fam_all, np.where(hidden, 0.0, np.tile(rows["z"], variants)),
            np.where(hidden, 0.0, np.tile(rows["zs"], variants)), variants)


def _ranked(rows: dict, scores: np.ndarray) -> list[dict]:
    """The families of one step by how much its score drops without them (`scores`: as it is, then
    each family present at its baseline), with their most moved keys."""
    present = np.unique(rows["family"])
    out = []
    for k in np.argsort(scores[1:] - scores[0])[:TOP_FAMILIES]:
        contribution = float(scores[0] - scores[1 + k])
        if contribution <= 0 or (out and contribution < MIN_CONTRIBUTION):
            break
        mine = _take(rows, rows["family"] == present[k])
        moved = np.abs(mine["zs"])
        order = np.argsort(-moved, kind="stable")[:KEYS_PER_FAMILY]
        # the family's most moved key always; a second one only when it moved past its noise too
        top = order[(np.arange(len(order)) == 0) | (moved[order] > MOVED_Z)]
        out.append({
            "family": FAMILY_NAMES[present[k]],
            "contribution": round(contribution, 4),
            "keys": [{"key": str(mine["key"][i]), "value": float(mine["value"][i]), "baseline": float(mine["baseline"][i]),
                      "z": round(float(mine["z"][i]), 2), "step": int(mine["step"][i])} for i in top],
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
    other = other.reset_index(drop=True)
    group = other.groupby(["run_id", "episode_id"], sort=False).ngroup().to_numpy()
    peaks = other.groupby(group)["score"].idxmax().to_numpy()
    at = rows_of(other[["run_id", "step"]], signals)
    mine = signals[at >= 0]
    rows = signal_arrays(mine)
    rows["group"] = group[at[at >= 0]][np.isfinite(mine["z"].to_numpy(dtype=float))]
    order = np.argsort(rows["group"], kind="stable")
    bounds = np.searchsorted(rows["group"][order], np.arange(len(peaks) + 1))
    episodes = [_take(rows, order[bounds[g]:bounds[g + 1]]) for g in range(len(peaks))]
    steps = other["step"].to_numpy()[peaks]
    found = peak_drivers(model, [_take(mine, mine["step"] == step) for mine, step in zip(episodes, steps, strict=True)])
    for pos, mine, drivers in zip(peaks, episodes, found, strict=True):
        drivers = at_extreme(drivers, mine)
        key = (other["run_id"].iat[pos], other["episode_id"].iat[pos])
        texts[key] = drivers_text(drivers, float(other["score"].iat[pos]), model.typical_score, int(other["step"].iat[pos]))
        payloads[key] = json.dumps(drivers)
    return texts, payloads


def at_extreme(drivers: list[dict], rows: dict) -> list[dict]:
    """`drivers` with each key's value, baseline and z taken at the step of the episode (`rows`: its
    `signal_arrays`) where the key is furthest from the run's baseline the way it moved at the peak, in
    its own units (z is clipped, and several steps of a large move would tie), and that step."""
    for d in drivers:
        for k in d["keys"]:
            mine = np.flatnonzero(rows["key"] == k["key"])
            away = (rows["value"][mine] - rows["baseline"][mine]) * (1.0 if k["z"] >= 0 else -1.0)
            if np.isfinite(away).any():
                best = mine[int(np.nanargmax(away))]
                k.update(value=float(rows["value"][best]), baseline=float(rows["baseline"][best]),
                         z=round(float(rows["z"][best]), 2), step=int(rows["step"][best]))
    return drivers
