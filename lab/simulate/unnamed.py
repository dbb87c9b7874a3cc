"""Anomaly kinds no detection rule names: labelled class `other`, with the kind, for evaluating the model.

Each kind moves signals the rules do not read (critic losses, advantages, prompt and sequence
lengths, host memory, unattributed step time, ...); `dynamics.generate_run` applies them. They are
not part of the default fleet: `add_unnamed_episodes` places them on the specs of a fleet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .spec import Episode, RunSpec, _free_range

# kind -> ((subtle low, high), (obvious low, high)) magnitude; what it means is in dynamics._UNNAMED.
# The first five are the kinds the detector was tuned with; the last five were only measured.
UNNAMED_KINDS = {
    "critic_divergence": ((4.0, 8.0), (15.0, 60.0)),  # critic/vf_loss x magnitude
    "advantage_collapse": ((0.3, 0.45), (0.02, 0.1)),  # advantage spread x magnitude
    "prompt_truncation": ((0.55, 0.7), (0.25, 0.45)),  # prompt length x magnitude
    "step_overhead": ((0.35, 0.6), (0.8, 2.0)),  # unattributed seconds, x the median step time
    "host_memory_leak": ((0.12, 0.2), (0.35, 0.8)),  # host memory growth over the episode
    "response_truncation": ((0.2, 0.35), (0.5, 0.9)),  # share of responses cut at the length limit
    "seqlen_imbalance": ((3.0, 5.0), (8.0, 20.0)),  # max-min sequence length spread x magnitude
    "entropy_blowup": ((1.6, 2.2), (2.5, 5.0)),  # entropy x magnitude
    "kl_loss_drift": ((4.0, 8.0), (15.0, 50.0)),  # actor/kl_loss x magnitude
    "aborted_rollouts": ((0.06, 0.15), (0.3, 0.6)),  # share of aborted rollouts
}
TUNED_KINDS = tuple(UNNAMED_KINDS)[:5]


@dataclass(frozen=True)
class UnnamedEpisode(Episode):
    """An episode of class `other`; `kind` says which unnamed kind it is."""

    kind: str = ""

    def label(self) -> dict:
        """The episode as labels.json writes it, with its kind."""
        return {**super().label(), "kind": self.kind}


def feasible_kinds(spec: RunSpec) -> list[str]:
    """The unnamed kinds this run logs the signals of (a critic, a KL loss, the abort ratio)."""
    kinds = []
    for kind in UNNAMED_KINDS:
        if kind == "critic_divergence" and not spec.has_critic:
            continue
        if kind == "kl_loss_drift" and not spec.use_kl_loss:
            continue
        if kind == "aborted_rollouts" and spec.fmt != "np2":
            continue
        kinds.append(kind)
    return kinds


def add_unnamed_episodes(specs: list[RunSpec], seed: int, kinds: tuple[str, ...] = tuple(UNNAMED_KINDS),
                         share: float = 0.5) -> int:
    """Add one unnamed episode to about `share` of the runs that already have episodes (the healthy
    runs stay healthy), cycling through `kinds`; return how many were added.

    Episodes are 2-11 steps in the final segment, clear of the other episodes by 2 steps.
    """
    rng = np.random.default_rng([seed, 424243])
    added = 0
    for spec in specs:
        if not spec.episodes or rng.random() >= share:
            continue
        options = [k for k in kinds if k in feasible_kinds(spec)]
        if not options:
            continue
        kind = options[added % len(options)]
        first = max(spec.segments[-1].start_step + 1, 3)
        taken = [(e.first_step, e.last_step) for e in spec.episodes]
        span = _free_range(taken, first, spec.last_step - 2, int(rng.integers(2, 12)), rng)
        if span is None:
            continue
        lo, hi = UNNAMED_KINDS[kind][0 if rng.random() < 0.5 else 1]
        episode = UnnamedEpisode("other", span[0], span[1], float(rng.uniform(lo, hi)), kind)
        spec.episodes = sorted([*spec.episodes, episode], key=lambda e: e.first_step)
        added += 1
    return added
