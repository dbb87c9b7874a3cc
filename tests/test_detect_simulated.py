"""What the detector is evaluated on: the simulator's healthy texture and its anomaly kinds no rule names."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lab.simulate import fleet_specs, generate_run
from lab.simulate.unnamed import UNNAMED_KINDS, UnnamedEpisode, add_unnamed_episodes, feasible_kinds

# kind -> keys its episodes must move (x the same run without the episode, somewhere in the episode)
MOVES = {
    "critic_divergence": ("critic/vf_loss", "critic/grad_norm", "critic/vpred_mean"),
    "advantage_collapse": ("critic/advantages/max", "critic/advantages/min", "actor/pg_clipfrac"),
    "prompt_truncation": ("prompt_length/mean", "perf/total_num_tokens", "global_seqlen/mean"),
    "step_overhead": ("timing_s/step", "perf/throughput"),
    "host_memory_leak": ("perf/cpu_memory_used_gb",),
    "response_truncation": ("response_length/clip_ratio", "timing_s/gen"),
    "seqlen_imbalance": ("global_seqlen/minmax_diff", "global_seqlen/max"),
    "entropy_blowup": ("actor/entropy", "response_length/clip_ratio"),
    "kl_loss_drift": ("actor/kl_loss",),
    "aborted_rollouts": ("response/aborted_ratio", "response_length/min"),
}


def _host(kind: str):
    """A run of a fixed fleet that can show `kind` and logs enough steps for an episode at 20-25."""
    for spec in fleet_specs(60, 11):
        if kind in feasible_kinds(spec) and spec.segments == spec.segments[:1] and spec.last_step >= 40:
            return spec
    raise AssertionError(f"no run for {kind}")


@pytest.mark.parametrize("kind", list(UNNAMED_KINDS))
def test_each_unnamed_kind_moves_its_signals_inside_its_episode_only(kind):
    spec = _host(kind)
    base = generate_run(spec).values
    with_episode = copy.deepcopy(spec)
    lo, hi = UNNAMED_KINDS[kind][1]
    with_episode.episodes = [*spec.episodes, UnnamedEpisode("other", 20, 25, (lo + hi) / 2, kind)]
    trace = generate_run(with_episode)
    inside = (trace.step >= 20) & (trace.step <= 25)
    for key in MOVES[kind]:
        changed = ~np.isclose(trace.values[key], base[key], equal_nan=True)
        assert changed[inside].any(), key
        assert not changed[~inside].any(), key
    assert trace.spec.episodes[-1].label() == {"class": "other", "first_step": 20, "last_step": 25,
                                               "magnitude": round((lo + hi) / 2, 4), "kind": kind}


def test_unnamed_episodes_go_to_runs_with_episodes_and_leave_the_healthy_ones_alone():
    specs = fleet_specs(60, 12)
    healthy = {s.run_id for s in specs if not s.episodes}
    added = add_unnamed_episodes(specs, 12, share=1.0)
    others = [(s, e) for s in specs for e in s.episodes if e.cls == "other"]
    assert added == len(others) >= 15
    assert not healthy & {s.run_id for s, _ in others}
    assert {e.kind for _, e in others} >= set(UNNAMED_KINDS) - {"critic_divergence", "kl_loss_drift", "aborted_rollouts"}
    for spec, episode in others:
        assert episode.kind in feasible_kinds(spec)
        assert spec.segments[-1].start_step < episode.first_step <= episode.last_step <= spec.last_step
        named = [e for e in spec.episodes if e is not episode]
        assert all(episode.last_step + 2 < e.first_step or episode.first_step > e.last_step + 2 for e in named)


def test_healthy_runs_look_like_real_ones():
    """Half the runs log a pre-clip gradient norm that swings several-fold (real: 2-16); the policy loss
    changes sign; entropy declines while the score rises."""
    swings, signs, declines = [], [], []
    for spec in fleet_specs(60, 13):
        if spec.episodes or spec.last_step < 60:
            continue
        v = generate_run(spec).values
        grad = v["actor/grad_norm"]
        swings.append(np.quantile(grad, 0.98) / np.quantile(grad, 0.02))
        signs.append((v["actor/pg_loss"] > 0).mean())
        n = len(grad) // 5
        rises = v["critic/score/mean"][-n:].mean() > v["critic/score/mean"][:n].mean()
        declines.append(rises and v["actor/entropy"][-n:].mean() < v["actor/entropy"][:n].mean())
    swings = np.array(swings)
    assert len(swings) >= 10
    assert 0.25 <= (swings > 4).mean() <= 0.75  # the pre-clip runs
    assert swings.max() < 40
    assert all(0.2 < s < 0.8 for s in signs)
    assert np.mean(declines) >= 0.9
