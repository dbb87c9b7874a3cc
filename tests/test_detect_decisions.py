"""Small decisions of the detect layer on hand-built inputs, each expected value worked out by hand:
episode numbering, how a feature's move is worded, the explanation of a flagged step, rule strength."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.detect import apply_rules, episodes
from pipeline.detect.explain import EXPLAIN_CHANNELS, _describe, explain_steps
from pipeline.detect.rules import Rule, _condition_strength


def test_episodes_without_classes_at_run_edges():
    """Without classes, a flagged step after an unflagged one starts an episode; ids restart per run,
    also for a run that starts flagged or holds one row."""
    runs = np.array(["a", "a", "a", "b", "c", "c"])
    steps = np.array([5, 6, 7, 1, 1, 2])
    flagged = np.array([1, 0, 1, 1, 1, 1], dtype=bool)
    ep, first, last = episodes(runs, steps, flagged)
    assert ep.tolist() == [1, 0, 2, 1, 1, 1]
    assert first[flagged].tolist() == [5, 7, 1, 1, 1] and last[flagged].tolist() == [5, 7, 1, 2, 2]
    assert ep.dtype == first.dtype == last.dtype == np.int64
    ep, _, _ = episodes(np.array(["a", "b", "b"]), np.array([1, 1, 2]), np.ones(3, dtype=bool))
    assert ep.tolist() == [1, 1, 1]
    assert [a.tolist() for a in episodes(np.array(["a"]), np.array([9]), np.ones(1, dtype=bool))] == [[1], [9], [9]]


def test_episodes_of_nothing():
    """No rows: three empty integer arrays."""
    out = episodes(np.array([]), np.array([]), np.array([], dtype=bool))
    assert [(len(a), a.dtype) for a in out] == [(0, np.int64)] * 3


@pytest.mark.parametrize(("channel", "value", "base", "ratio", "text"), [
    ("gen", 12.0, 10.0, 1.2, "gen +20%"),
    ("gen", 15.0, 10.0, 1.5, "gen 1.5x the run's baseline"),
    ("throughput", 50.0, 100.0, 0.5, "throughput -50%"),
    ("throughput", 5.0, 100.0, 0.05, "throughput -95%"),
    ("ppo_kl", 0.5, 0.01, np.nan, "ppo_kl 0.5 (baseline 0.01)"),
    ("reward_mean", 0.2, 0.6, np.nan, "reward_mean 0.2 (baseline 0.6)"),
])
def test_a_move_is_worded_by_the_kind_of_channel(channel, value, base, ratio, text):
    """Timers and sizes as a percentage or a multiple of the run's baseline; signed and linear channels
    as the value next to its baseline."""
    assert _describe(channel, value, base, ratio) == text


def _frame(rows: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Quiet features (every z 0, baselines 1) and raw values (NaN) for `rows` steps."""
    cols = {f"z_{c}": 0.0 for c in EXPLAIN_CHANNELS} | {f"base_{c}": 1.0 for c in EXPLAIN_CHANNELS}
    cols |= {"nonfinite": 0, "mem_fraction": 0.5, "pg_clipfrac": 0.01}
    return pd.DataFrame([cols] * rows), pd.DataFrame({c: [np.nan] * rows for c in EXPLAIN_CHANNELS})


def test_explanation_of_a_flagged_step():
    """The class's own channels first, then other channels past 4 z the bad way (largest first), up to three
    parts, then the fleet note for the class's first channel, memory above 90% and clipping above 0.25;
    an unflagged step gets none, a flagged step with nothing to cite a fallback."""
    features, raw = _frame(5)
    features.loc[1, ["z_gen", "base_gen", "gen_ratio", "gen_vs_fleet"]] = [8.0, 10.0, 3.0, 2.0]
    features.loc[1, ["z_throughput", "base_throughput", "throughput_ratio", "throughput_vs_fleet"]] = [-2.0, 100, 0.5, 3]
    features.loc[1, ["z_grad_norm", "nonfinite", "mem_fraction", "pg_clipfrac"]] = [9.0, 1, 0.95, 0.3]
    raw.loc[1, ["gen", "throughput", "grad_norm"]] = [30.0, 50.0, 4.0]
    features.loc[2, ["z_ppo_kl", "base_ppo_kl", "z_grad_norm", "grad_norm_ratio"]] = [5.0, 0.01, 9.0, 2.0]
    features.loc[2, ["z_entropy", "base_entropy", "entropy_ratio"]] = [-4.0, 0.6, 0.5]
    raw.loc[2, ["ppo_kl", "grad_norm", "entropy"]] = [0.5, 2.0, 0.3]
    features.loc[3, ["mem_fraction", "pg_clipfrac"]] = [0.9, 0.25]
    features.loc[4, ["z_update_actor", "base_update_actor", "update_actor_ratio", "update_actor_vs_fleet"]] = [
        6.0, 12.0, 2.0, 1.5]
    raw.loc[4, "update_actor"] = 24.0
    raw = raw.drop(columns="step_time")  # a class channel the run does not log
    flagged = np.array([False, True, True, True, True])
    classes = np.array([None, "gen_slowdown", "kl_spike", "other", "update_actor_slowdown"], dtype=object)
    assert explain_steps(features, raw, flagged, classes).tolist() == [
        None,
        "non-finite values in 1 metric(s); gen 3.0x the run's baseline; throughput -50%; "
        "gen 2.0x the fleet's median for this config; GPU memory 95% used; clip fraction 0.30",
        "ppo_kl 0.5 (baseline 0.01); grad_norm 2.0x the run's baseline; entropy -50%",
        "unusual combination of metrics (model score)",
        "update_actor 2.0x the run's baseline",
    ]
    one = explain_steps(features, raw, np.array([False, False, False, False, True]), classes)
    assert one.tolist() == [None] * 4 + ["update_actor 2.0x the run's baseline"]


@pytest.mark.parametrize(("x", "op", "value", "strength"), [
    ([0.3, 0.1, np.nan], ">", 0.2, [1.5, 0.5, 0.0]),
    ([0.4, -0.4], ">=", 0.2, [2.0, 0.0]),
    ([-0.6], "<", -0.3, [2.0]),
    ([-1.0], "<=", -0.5, [2.0]),
    ([0.25], "<", 0.5, [2.0]),
    ([0.1, 0.0, -1.0], "<=", 0.5, [5.0, 50.0, 50.0]),
    ([3.0], ">", 0.0, [1.0]),
    ([3.0], "<", 0.0, [1.0]),
    ([3.0], "==", 2.0, [1.0]),
    ([1e9], ">", 1.0, [50.0]),
])
def test_rule_strength_is_how_far_past_the_threshold(x, op, value, strength):
    """Strength is x over the threshold (or the threshold over x for an upper bound), 1 for a zero
    threshold, 0 for a missing value, at most 50."""
    assert _condition_strength(np.array(x), op, value).tolist() == pytest.approx(strength)


def test_rule_results_keep_the_steps_index():
    """Hits and strengths come back on the features' own index, 0 strength where the rule does not fire."""
    features = pd.DataFrame({"ppo_kl": [0.3, 0.1]}, index=[10, 11])
    rule = Rule("kl_high", "kl_spike", (("ppo_kl", ">", 0.2),), "flag", weight=1.0, seed=True, source="000")
    hits, strength = apply_rules(features, (rule,))
    assert hits.index.tolist() == strength.index.tolist() == [10, 11]
    assert hits["kl_high"].tolist() == [True, False] and strength["kl_high"].tolist() == pytest.approx([1.5, 0.0])
