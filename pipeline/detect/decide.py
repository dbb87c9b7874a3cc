"""The final decision per step: the rules, gated by the forest, the forest's own `other` flags, hysteresis."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.detect.explain import episodes
from pipeline.detect.model import DEFAULT_THRESHOLDS, FittedModel, judged_steps
from pipeline.detect.rules import OPS, Rule, apply_rules, load_rules
from pipeline.detect.signals import MOVED_Z
from pipeline.detect.stretches import grow, opening, stretch_ids, stretch_lengths
from pipeline.vocabulary import ANOMALIES

# The signal families (signals.FAMILIES) each named class shows in (pipeline/vocabulary.py).
CLASS_FAMILIES = {a.name: a.families for a in ANOMALIES}


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
    hit only where the forest's gate agrees the step is unusual, so the gate cuts rule false alarms.
    A step no rule fires on is flagged as class `other` when the forest scores it past `other_score`
    on at least `other_steps` consecutive steps, some signal moved past its noise, and the step is
    past the run's opening transient when it has one (`stretches.opening`). Flagged stretches then
    grow over neighbouring steps where the same class's feature's 3-step median stays past `loose` x
    its threshold (hysteresis). A step's class is its strongest rule's; consecutive flagged steps of
    one class form an episode. `use_model=False` leaves the forest out (rules alone), `use_rules=False`
    the rules (the forest alone, every flag `other`).
    """
    rules = (rules or load_rules()) if use_rules else ()
    th = _thresholds(model, thresholds)
    n = len(features)
    runs = features["run_id"].to_numpy()
    hits, strength = apply_rules(features, rules) if rules else (pd.DataFrame(index=features.index),) * 2
    classes = sorted({r.anomaly_class for r in rules})
    cls_score = _class_matrix(hits, strength, rules, classes) if rules else np.zeros((n, 0))
    step_cls = np.array(classes, dtype=object)[cls_score.argmax(axis=1)] if classes else np.full(n, "other")

    forest = model is not None and model.forest is not None and use_model
    score = model.scores(features) if forest else np.full(n, np.nan)
    judged = judged_steps(features) & forest
    with np.errstate(invalid="ignore"):
        gate = score > model.gate if forest else np.zeros(n, bool)
    seed, fired = _rule_flags(features, hits, strength, rules, th, judged & gate)
    other = _other_flags(features, runs, score, judged, fired, th)

    flagged, final_cls = _hysteresis(features, runs, seed, other, step_cls, classes, rules, th)
    # a model-only stretch that touches a named episode and moves the signals that class reads is that
    # event's run-up or recovery, not another anomaly
    flagged &= ~_same_event(features, runs, flagged, final_cls)
    final_cls = _settled_classes(runs, flagged, final_cls, step_cls, cls_score)
    return _decision_frame(features, runs, flagged, score, final_cls, hits, rules)


def _thresholds(model: FittedModel | None, thresholds: dict | None) -> dict:
    """DEFAULT_THRESHOLDS, overridden by the model's, overridden by `thresholds`."""
    th = dict(DEFAULT_THRESHOLDS)
    if model is not None:
        th.update(model.thresholds)
    th.update(thresholds or {})
    return th


def _any_hit(hits: pd.DataFrame, rules, n: int) -> np.ndarray:
    """Steps where any of `rules` fired."""
    return hits[[r.name for r in rules]].to_numpy().any(axis=1) if rules else np.zeros(n, bool)


def _rule_flags(features: pd.DataFrame, hits: pd.DataFrame, strength: pd.DataFrame, rules, th: dict,
                gated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps the rules flag (a flag rule; a lasting attribute hit that is strong, sustained or `gated`),
    and the steps where any rule fired at all."""
    n = len(features)
    flag_rules = [r for r in rules if r.mode == "flag"]
    attr_rules = [r for r in rules if r.mode == "attribute"]
    flag_hit, attr_hit = _any_hit(hits, flag_rules, n), _any_hit(hits, attr_rules, n)
    # a hit must last (its feature's 3-step median past a share of the threshold): a one-step blip is
    # the tail of the run's own noise
    lasting = _strong_hits(features, hits, strength, attr_rules, np.inf, th["gated_sustained"], ratios_last=True)
    strong = _strong_hits(features, hits, strength, attr_rules, th["strong"], th["sustained"]) & lasting
    return flag_hit | strong | (attr_hit & gated & lasting), flag_hit | attr_hit


def _other_flags(features: pd.DataFrame, runs: np.ndarray, score: np.ndarray, judged: np.ndarray,
                 fired: np.ndarray, th: dict) -> np.ndarray:
    """Steps no rule fired on that the forest scores past `other_score` for `other_steps` steps in a
    row, with some signal moved, past the run's opening transient (which only fades: `stretches.opening`)."""
    n = len(features)
    top = features["sig_top"].to_numpy(dtype=float) if "sig_top" in features else np.zeros(n)
    with np.errstate(invalid="ignore"):
        moved = top > th.get("other_evidence", MOVED_Z)
        candidate = judged & moved & (score > th["other_score"]) & ~fired & ~opening(runs, moved, top)
    return stretch_lengths(runs, candidate) >= th["other_steps"]


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


def _smoothed(features: pd.DataFrame, feature: str) -> np.ndarray | None:
    """The 3-step centred median of a z feature (`zs_...`), if there is one."""
    name = "zs_" + feature[2:] if feature.startswith("z_") else None
    return features[name].to_numpy(dtype=float) if name in features else None


def _strong_hits(features: pd.DataFrame, hits: pd.DataFrame, strength: pd.DataFrame, rules,
                 strong: float, sustained: float, ratios_last: bool = False) -> np.ndarray:
    """Attribute-rule hits `strong` x past their threshold, or whose feature's 3-step median is past
    `sustained` x the threshold; with `ratios_last`, a rule's ratio conditions (`<channel>_ratio`) must
    hold on their 3-step median too (one slow step between ordinary ones is no lasting change)."""
    out = np.zeros(len(features), bool)
    for r in rules:
        fired = hits[r.name].to_numpy()
        if ratios_last:
            for f, op, v in r.when[1:]:
                if f.endswith("_ratio") and f + "_s" in features:
                    with np.errstate(invalid="ignore"):
                        fired = fired & OPS[op](features[f + "_s"].to_numpy(dtype=float), v)
        out |= fired & (strength[r.name].to_numpy() >= strong)
        f, op, v = r.when[0]
        smooth = _smoothed(features, f)
        if smooth is not None:
            with np.errstate(invalid="ignore"):
                out |= fired & OPS[op](smooth, v * sustained)
    return out


def _hysteresis(features: pd.DataFrame, runs: np.ndarray, seed: np.ndarray, other: np.ndarray,
                step_cls: np.ndarray, classes: list[str], rules, th: dict) -> tuple[np.ndarray, np.ndarray]:
    """Flagged steps and their class after each class's flagged stretches grow over neighbours whose
    class feature (3-step median) stays past `loose` x its rule's threshold."""
    flagged = seed | other
    final_cls = np.where(seed, step_cls, np.where(other, "other", None)).astype(object)
    for cls in classes:
        zrules = [r for r in rules if r.mode == "attribute" and r.anomaly_class == cls and r.when[0][0].startswith("z_")]
        mine = seed & (step_cls == cls)
        if not zrules or not mine.any():
            continue
        grown = grow(runs, mine, _loose(features, zrules, th["loose"])) & ~flagged
        final_cls = np.where(grown, cls, final_cls)
        flagged |= grown
    return flagged, final_cls


def _loose(features: pd.DataFrame, zrules, share: float) -> np.ndarray:
    """Steps where one of `zrules`' feature (its 3-step median when there is one) is past `share` x its threshold."""
    loose = np.zeros(len(features), bool)
    for r in zrules:
        f, op, v = r.when[0]
        zs = _smoothed(features, f)
        zs = features[f].to_numpy(dtype=float) if zs is None else zs
        with np.errstate(invalid="ignore"):
            loose |= OPS[op](zs, v * share)
    return loose


def _same_event(features: pd.DataFrame, runs: np.ndarray, flagged: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """`other` rows of a stretch right next to a named episode whose signal family at the stretch's
    peak (largest `sig_top`) is one that episode's class shows in."""
    other = flagged & (cls == "other")
    out = np.zeros(len(cls), bool)
    if not other.any() or "sig_family" not in features:
        return out
    family = features["sig_family"].to_numpy()
    top = features["sig_top"].to_numpy(dtype=float)
    stretch = stretch_ids(runs, other)
    peak_family = pd.Series(top[other], index=np.flatnonzero(other)).groupby(stretch[other]).idxmax()
    stretch_family = np.full(stretch.max() + 1, "", dtype=object)
    stretch_family[peak_family.index] = family[peak_family.to_numpy()]
    for name, families in CLASS_FAMILIES.items():
        named = flagged & (cls == name)
        if named.any():
            touching = grow(runs, named, other) & other
            out |= touching & np.isin(stretch_family[stretch], families)
    return out


def _settled_classes(runs: np.ndarray, flagged: np.ndarray, final_cls: np.ndarray, step_cls: np.ndarray,
                     cls_score: np.ndarray) -> np.ndarray:
    """Each flagged step's class: its strongest rule's; steps no rule names (grown, model-only) keep the
    class they were given; a lone step between two steps of one class takes that class. None elsewhere."""
    final_cls = np.where(flagged, final_cls, None)
    named = flagged & (cls_score.max(axis=1) > 0) if cls_score.shape[1] else np.zeros(len(runs), bool)
    final_cls = np.where(named, step_cls, final_cls)
    final_cls = np.where(flagged, final_cls, None)
    same_run = np.r_[False, runs[1:] == runs[:-1]] & np.r_[runs[:-1] == runs[1:], False]
    prev_cls = np.r_[None, final_cls[:-1]]
    next_cls = np.r_[final_cls[1:], None]
    lone = flagged & same_run & (prev_cls == next_cls) & (prev_cls != final_cls) & (prev_cls != None)  # noqa: E711
    return np.where(lone, prev_cls, final_cls)


def _decision_frame(features: pd.DataFrame, runs: np.ndarray, flagged: np.ndarray, score: np.ndarray,
                    final_cls: np.ndarray, hits: pd.DataFrame, rules) -> pd.DataFrame:
    """decide's output: per step its flag, score, class, episode and the rules that fired (flagged steps)."""
    n = len(features)
    steps = features["step"].to_numpy()
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
