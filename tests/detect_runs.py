"""Hand-made runs for the detect tests: step_phases and step_health frames, and their step_metrics rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

# (column, factor) an episode of each class applies, on top of its side effects below
EFFECT = {
    "gen_slowdown": ("gen", 2.0),
    "old_log_prob_slowdown": ("old_log_prob", 2.0),
    "update_actor_slowdown": ("update_actor", 2.0),
    "kl_spike": ("ppo_kl", 60.0),
    "grad_explosion": ("grad_norm", 10.0),
    "memory_pressure": ("mem_reserved_gb", 1.45),
    "entropy_collapse": ("entropy", 0.35),
    "response_length_collapse": ("response_length_mean", 0.4),
    "reward_collapse": ("reward_mean", 0.35),
}


def make_run(run_id: str = "run-a", n: int = 80, seed: int = 0, episode=None):
    """step_phases and step_health frames of one healthy run, with an optional (class, first, last) episode.

    Every 10th step runs validation and every 20th saves a checkpoint, outside `step_time`.
    """
    rng = np.random.default_rng(seed)
    step = np.arange(1, n + 1)
    f = step / n
    noise = lambda s: rng.lognormal(0, s, n)  # noqa: E731
    resp = 600 * (1 + 0.2 * f) * noise(0.04)
    h = {
        "run_id": run_id, "step": step,
        "reward_mean": np.clip(0.3 + 0.3 * (1 - np.exp(-4 * f)) + rng.normal(0, 0.02, n), 0, 1),
        "ppo_kl": rng.normal(1e-4, 3e-4, n),
        "entropy": 0.6 * (1 - 0.3 * f) * noise(0.04),
        "pg_loss": rng.normal(0, 0.01, n),
        "pg_clipfrac": 0.003 * noise(0.3),
        "grad_norm": 0.4 * noise(0.2),
        "response_length_mean": resp,
        "mem_reserved_gb": 50 * noise(0.01),
        "has_nan": np.zeros(n, dtype=bool),
    }
    h["mem_allocated_gb"] = h["mem_reserved_gb"] - rng.uniform(1, 3, n)
    p = {
        "run_id": run_id, "step": step,
        "gen": resp * 0.05 * noise(0.1),
        "old_log_prob": 6.0 * noise(0.08),
        "ref": 5.0 * noise(0.08),
        "update_actor": 12.0 * noise(0.08),
        "reward": 1.0 * noise(0.2),
        "adv": 0.1 * noise(0.2),
    }
    if episode is not None:
        cls, a, b = episode
        m = (step >= a) & (step <= b)
        if cls == "nan_loss":
            h["pg_loss"] = np.where(m, np.nan, h["pg_loss"])
            h["grad_norm"] = np.where(m, np.inf, h["grad_norm"])
            h["has_nan"] = m
        else:
            col, factor = EFFECT[cls]
            target = h if col in h else p
            target[col] = np.where(m, target[col] * factor, target[col])
            if cls == "kl_spike":
                h["ppo_kl"] = np.where(m, 0.01 * factor / 10, h["ppo_kl"])
            if cls == "memory_pressure":
                h["mem_allocated_gb"] = np.where(m, h["mem_reserved_gb"] - 1, h["mem_allocated_gb"])
            if cls == "response_length_collapse":
                p["gen"] = np.where(m, p["gen"] * factor, p["gen"])
    phases = pd.DataFrame(p)
    inside = ["gen", "old_log_prob", "ref", "update_actor", "reward", "adv"]
    phases["step_time"] = phases[inside].sum(axis=1) + 1.0
    phases["testing"] = np.where(step % 10 == 0, 40.0, np.nan)
    phases["save_checkpoint"] = np.where(step % 20 == 0, 90.0, np.nan)
    phases["throughput"] = resp * 512 / phases["step_time"]
    for c in inside:
        phases[f"share_{c}"] = phases[c] / phases["step_time"]
    return phases, pd.DataFrame(h)


def fleet(n_runs: int = 6, seed: int = 0, episodes=None):
    """Several runs concatenated; `episodes` maps run index -> (class, first, last)."""
    parts = [make_run(f"run-{i}", seed=seed * 100 + i, episode=(episodes or {}).get(i)) for i in range(n_runs)]
    return pd.concat([p for p, _ in parts], ignore_index=True), pd.concat([h for _, h in parts], ignore_index=True)


# step_phases / step_health column -> the verl key it comes from (sql/step_*.sql read them back)
VERL_KEYS = {
    "gen": "timing_s/gen", "old_log_prob": "timing_s/old_log_prob", "ref": "timing_s/ref",
    "update_actor": "timing_s/update_actor", "reward": "timing_s/reward", "adv": "timing_s/adv",
    "step_time": "timing_s/step", "testing": "timing_s/testing", "save_checkpoint": "timing_s/save_checkpoint",
    "throughput": "perf/throughput", "reward_mean": "critic/score/mean", "ppo_kl": "actor/ppo_kl",
    "entropy": "actor/entropy", "pg_loss": "actor/pg_loss", "pg_clipfrac": "actor/pg_clipfrac",
    "grad_norm": "actor/grad_norm", "response_length_mean": "response_length/mean",
    "mem_reserved_gb": "perf/max_memory_reserved_gb", "mem_allocated_gb": "perf/max_memory_allocated_gb",
}


def extra_signals(n: int, seed: int) -> dict[str, np.ndarray]:
    """Signals a verl run logs that no rule reads: the critic's loss and gradient, advantages, prompt
    lengths, host memory, the share of responses cut at the length limit."""
    rng = np.random.default_rng([seed, 99])
    f = np.arange(1, n + 1) / n
    adv = 2.0 * rng.lognormal(0, 0.05, n)
    return {
        "critic/vf_loss": 0.05 * np.exp(-f) * rng.lognormal(0, 0.2, n),
        "critic/grad_norm": 20 * rng.lognormal(0, 0.3, n),
        "critic/advantages/max": adv,
        "critic/advantages/min": -adv,
        "prompt_length/mean": 150 * rng.lognormal(0, 0.02, n),
        "perf/cpu_memory_used_gb": 300 * (1 + 0.02 * f) * rng.lognormal(0, 0.01, n),
        "response_length/clip_ratio": np.round(rng.uniform(0, 0.05, n), 3),
    }


def to_metrics(phases: pd.DataFrame, health: pd.DataFrame, extra: dict[str, dict] | None = None) -> pd.DataFrame:
    """step_metrics rows (run_id, step, key, value, segment) of hand-made runs: their phases and health
    under the verl keys, plus `extra[run_id]` (key -> values, one per step)."""
    parts = []
    for frame in (phases, health):
        for col, key in VERL_KEYS.items():
            if col in frame:
                rows = frame[["run_id", "step", col]].dropna(subset=[col]).rename(columns={col: "value"})
                parts.append(rows.assign(key=key))
    for rid, series in (extra or {}).items():
        steps = phases.loc[phases["run_id"] == rid, "step"].to_numpy()
        for key, values in series.items():
            parts.append(pd.DataFrame({"run_id": rid, "step": steps, "value": values, "key": key}))
    return pd.concat(parts, ignore_index=True).assign(segment=0)[["run_id", "step", "key", "value", "segment"]]
