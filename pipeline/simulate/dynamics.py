"""Per-step ground-truth metrics of one run: healthy trends with lognormal noise, plus injected episodes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metric_keys import step_keys, timers, validation_keys
from .spec import SLOWDOWN_PHASE, RunSpec


@dataclass
class RunTrace:
    """What the trainer of one run logged, position by position (one position per training step line).

    `step[i]`/`segment[i]` say which step line position i is; `values[key][i]` is the value meant.
    Steps redone after a resume appear once per segment; `final_rows()` keeps the last one.
    """

    spec: RunSpec
    step: np.ndarray
    segment: np.ndarray
    is_test: np.ndarray
    is_save: np.ndarray
    keys: list[str]
    values: dict[str, np.ndarray]
    val_lines: list[tuple[int, int, dict[str, float]]]  # (segment, step, metrics) of validation-only lines
    wall_s: np.ndarray  # wall seconds each step took, testing and checkpointing included

    @property
    def episodes(self):
        """The injected anomaly episodes."""
        return self.spec.episodes

    def line_keys(self, i: int) -> list[str]:
        """Keys on step line i, in print order."""
        return self._variants[(bool(self.is_test[i]), bool(self.is_save[i]))]

    def step_values(self, i: int) -> dict[str, float]:
        """Metric key -> value of step line i."""
        return {k: float(self.values[k][i]) for k in self.line_keys(i)}

    def final_rows(self) -> list[dict[str, float]]:
        """One dict per training step of the final timeline (later segments win), ordered by step."""
        last = {int(s): i for i, s in enumerate(self.step)}
        return [self.step_values(last[s]) for s in sorted(last)]

    def __post_init__(self) -> None:
        val = set(validation_keys(self.spec))
        self._variants = {}
        for test in (False, True):
            for save in (False, True):
                self._variants[(test, save)] = [
                    k for k in self.keys
                    if (test or (k not in val and k != "timing_s/testing")) and (save or k != "timing_s/save_checkpoint")
                ]


def _positions(spec: RunSpec) -> tuple[np.ndarray, np.ndarray]:
    steps, segs = [], []
    for k, seg in enumerate(spec.segments):
        s = np.arange(seg.start_step + 1, seg.end_step + 1, dtype=np.int64)
        steps.append(s)
        segs.append(np.full(len(s), k, dtype=np.int64))
    return np.concatenate(steps), np.concatenate(segs)


def _episode_mask(spec: RunSpec, step: np.ndarray, segment: np.ndarray, cls: str) -> tuple[np.ndarray, np.ndarray]:
    mask = np.zeros(len(step), dtype=bool)
    mag = np.ones(len(step))
    final = segment == len(spec.segments) - 1
    for ep in spec.episodes:
        if ep.cls == cls:
            m = final & (step >= ep.first_step) & (step <= ep.last_step)
            mask |= m
            mag[m] = ep.magnitude
    return mask, mag


def generate_run(spec: RunSpec) -> RunTrace:
    """Compute every metric of every step line of the run described by `spec` (vectorised, deterministic)."""
    rng = np.random.default_rng([spec.seed, 7919])
    step, segment = _positions(spec)
    n = len(step)
    f = step / max(spec.total_steps, 1)

    def noise(sigma: float) -> np.ndarray:
        return rng.lognormal(0.0, sigma, n)

    def episode(cls: str) -> tuple[np.ndarray, np.ndarray]:
        return _episode_mask(spec, step, segment, cls)

    v: dict[str, np.ndarray] = {}
    # rollout shape
    r0 = rng.uniform(0.05, 0.4)
    r1 = min(0.95, r0 + rng.uniform(0.2, 0.5))
    score = np.clip(r0 + (r1 - r0) * (1 - np.exp(-4 * f)) + rng.normal(0, 0.025, n), 0.0, 1.0)
    m, mag = episode("reward_collapse")
    score = np.where(m, score * mag, score)
    resp0 = spec.max_response_length * rng.uniform(0.15, 0.4)
    resp = resp0 * (1 + 0.25 * f) * noise(0.04)
    m, mag = episode("response_length_collapse")
    resp = np.where(m, resp * mag, resp)
    resp = np.maximum(resp, 3.0)
    prompt = spec.max_prompt_length * rng.uniform(0.15, 0.35) * noise(0.02)
    samples = spec.train_batch_size * spec.n
    resp_tokens = samples * resp
    total_tokens = np.round(samples * (resp + prompt)).astype(np.int64)
    world = spec.world_size

    seq_mean = total_tokens / world
    v["global_seqlen/min"] = np.floor(seq_mean * (1 - rng.uniform(0.02, 0.15, n)))
    v["global_seqlen/max"] = np.ceil(seq_mean * (1 + rng.uniform(0.02, 0.15, n)))
    v["global_seqlen/minmax_diff"] = v["global_seqlen/max"] - v["global_seqlen/min"]
    v["global_seqlen/balanced_min"] = np.floor(seq_mean)
    v["global_seqlen/balanced_max"] = np.ceil(seq_mean)
    v["global_seqlen/mean"] = seq_mean

    entropy = rng.uniform(0.3, 0.8) * (1 - 0.35 * f) * noise(0.04)
    m, mag = episode("entropy_collapse")
    v["actor/entropy"] = np.where(m, entropy * mag, entropy)

    ppo_kl = rng.normal(1e-4, 3e-4, n)
    kl_loss = (rng.uniform(5e-4, 2e-3) + 0.01 * f) * noise(0.15)
    clipfrac = rng.uniform(0.001, 0.004) * noise(0.4)
    grad = rng.uniform(0.1, 0.6) * noise(0.25)
    m, mag = episode("kl_spike")
    ppo_kl = np.where(m, 0.0075 * mag * noise(0.1), ppo_kl)
    kl_loss = np.where(m, np.maximum(kl_loss * mag, 0.0075 * mag), kl_loss)
    clipfrac = np.where(m, clipfrac * 5, clipfrac)
    grad = np.where(m, grad * 2, grad)
    m, mag = episode("grad_explosion")
    grad = np.where(m, grad * mag, grad)
    clipfrac = np.where(m, clipfrac * 2, clipfrac)
    pg_loss = rng.normal(0.0, 0.01, n)
    nan_m, nan_mag = episode("nan_loss")

    if spec.has_critic:
        vf_loss = 0.05 * np.exp(-2 * f) * noise(0.2)
        vf_loss = np.where(nan_m & (nan_mag > 1), np.nan, vf_loss)
        v["critic/vf_loss"] = vf_loss
        v["critic/vf_clipfrac"] = rng.uniform(0.0, 0.02, n)
        values_mean = score * 0.9 + rng.normal(0, 0.02, n)
        v["critic/vpred_mean"] = values_mean + rng.normal(0, 0.005, n)
        v["critic/grad_norm"] = rng.uniform(5, 40) * noise(0.3)
        v["perf/mfu/critic"] = rng.uniform(0.2, 0.4) * noise(0.03)
        v["critic/lr"] = np.full(n, 1e-5)
    v["actor/pg_loss"] = np.where(nan_m, np.nan, pg_loss)
    if spec.use_kl_loss:
        v["actor/kl_loss"] = np.where(nan_m & (nan_mag > 1), np.nan, kl_loss)
    v["actor/pg_clipfrac"] = clipfrac
    v["actor/ppo_kl"] = np.where(nan_m & (nan_mag > 1), np.nan, ppo_kl)
    v["actor/pg_clipfrac_lower"] = np.where(rng.random(n) < 0.8, 0.0, rng.uniform(0, 1e-4, n))
    if spec.use_kl_loss:
        v["actor/kl_coef"] = np.full(n, 0.001)
    v["actor/grad_norm"] = np.where(nan_m, np.nan, grad)
    v["actor/entropy"] = np.where(nan_m & (nan_mag > 1), np.nan, v["actor/entropy"])
    v["perf/mfu/actor"] = rng.uniform(0.2, 0.45) * noise(0.03)
    reserved = spec.gpu_total_gb * rng.uniform(0.55, 0.75) * noise(0.01)
    m, mag = episode("memory_pressure")
    reserved = np.where(m, spec.gpu_total_gb * mag, reserved)
    v["perf/max_memory_allocated_gb"] = reserved - rng.uniform(1.0, 4.0, n)
    v["perf/max_memory_reserved_gb"] = reserved
    v["perf/cpu_memory_used_gb"] = rng.uniform(150, 500) * (1 + 0.02 * f) * noise(0.01)
    v["actor/lr"] = np.full(n, spec.lr)

    val_base = np.clip(score * rng.uniform(0.8, 1.0) + rng.normal(0, 0.02, n), 0, 1)
    val_keys = validation_keys(spec)
    for k in val_keys:
        v[k] = _val_value(k, val_base, rng)
    v["training/global_step"] = step.astype(float)
    steps_per_epoch = max(1, spec.train_size // spec.train_batch_size)
    v["training/epoch"] = ((step - 1) // steps_per_epoch).astype(float)

    v["critic/score/mean"] = score
    v["critic/score/max"] = np.ones(n)
    v["critic/score/min"] = np.zeros(n)
    v["critic/rewards/mean"] = score
    v["critic/rewards/max"] = np.ones(n)
    v["critic/rewards/min"] = np.zeros(n)
    adv_span = rng.uniform(1.5, 3.0) * noise(0.05)
    v["critic/advantages/mean"] = rng.normal(0, 0.005, n)
    v["critic/advantages/max"] = adv_span
    v["critic/advantages/min"] = -adv_span
    if spec.has_critic:
        v["critic/returns/mean"] = score * 0.95 + rng.normal(0, 0.01, n)
        v["critic/returns/max"] = np.ones(n)
        v["critic/returns/min"] = np.zeros(n) - rng.uniform(0, 0.05, n)
        v["critic/values/mean"] = values_mean
        v["critic/values/max"] = values_mean + rng.uniform(0.3, 0.8, n)
        v["critic/values/min"] = values_mean - rng.uniform(0.3, 0.8, n)
        v["critic/vf_explained_var"] = np.clip(0.6 * (1 - np.exp(-5 * f)) + rng.normal(0, 0.05, n), -1, 1)
    else:
        for s in ("mean", "max", "min"):
            v[f"critic/returns/{s}"] = v[f"critic/advantages/{s}"]
    max_len = spec.max_response_length
    v["response_length/mean"] = resp
    v["response_length/max"] = np.minimum(max_len, np.round(resp * rng.uniform(2.0, 4.0, n)))
    v["response_length/min"] = np.minimum(resp, np.round(rng.uniform(3, 40, n)))
    v["response_length/clip_ratio"] = np.where(v["response_length/max"] >= max_len, rng.uniform(0, 0.05, n), 0.0)
    for s in ("mean", "max", "min", "clip_ratio"):
        v[f"response_length_non_aborted/{s}"] = v[f"response_length/{s}"]
    v["response/aborted_ratio"] = np.zeros(n)
    v["prompt_length/mean"] = prompt
    v["prompt_length/max"] = np.minimum(spec.max_prompt_length, np.round(prompt * rng.uniform(1.8, 2.6, n)))
    v["prompt_length/min"] = np.round(prompt * rng.uniform(0.3, 0.5, n))
    v["prompt_length/clip_ratio"] = np.zeros(n)
    v["num_turns/min"] = np.full(n, 2.0)
    v["num_turns/max"] = np.full(n, 2.0)
    v["num_turns/mean"] = np.full(n, 2.0)

    t = _timings(spec, rng, n, resp_tokens, samples * resp0, episode)
    is_test = (step % spec.test_freq == 0) | (step == spec.total_steps)
    is_save = (spec.save_freq > 0) & ((step % max(spec.save_freq, 1) == 0) | (step == spec.total_steps))
    for name in timers(spec):
        v[f"timing_s/{name}"] = t[name]
    v["timing_s/testing"] = t["gen_level"] * rng.uniform(0.3, 1.0) * noise(0.1)
    v["timing_s/save_checkpoint"] = spec.model_b * rng.uniform(3, 8) * noise(0.15)
    v["timing_s/start_profile"] = rng.uniform(1e-4, 3e-4, n)
    v["timing_s/stop_profile"] = rng.uniform(1e-4, 3e-4, n)
    gen = t["gen"]
    v["timing_s/generate_sequences"] = gen * rng.uniform(0.9, 0.97, n)
    v["timing_s/reshard"] = rng.uniform(0.1, 1.5, n)
    for stat, fac in (("min", 0.3), ("max", 0.98), ("mean", 0.6)):
        v[f"timing_s/agent_loop/generate_sequences/{stat}"] = gen * fac * noise(0.05)
        v[f"timing_s/agent_loop/tool_calls/{stat}"] = np.zeros(n)
    v["timing_s/agent_loop/slowest/generate_sequences"] = v["timing_s/agent_loop/generate_sequences/max"]
    v["timing_s/agent_loop/slowest/tool_calls"] = np.zeros(n)
    v["timing_s/agent_loop/slowest/prompt_length"] = v["prompt_length/max"]
    v["timing_s/agent_loop/slowest/response_length"] = v["response_length/max"]

    per_token = [p for p in ("gen", "ref", "values", "adv", "update_critic", "update_actor") if p in timers(spec)]
    rng.shuffle(per_token)
    for p in per_token:
        denom = resp_tokens if p == "gen" else total_tokens
        v[f"timing_per_token_ms/{p}"] = t[p] * 1000 / denom
    v["perf/total_num_tokens"] = total_tokens.astype(float)
    v["perf/time_per_step"] = t["step"]
    v["perf/throughput"] = total_tokens / (t["step"] * world)

    keys = step_keys(spec, per_token)
    values = {k: np.asarray(v[k], dtype=float) for k in keys}
    wall = t["step"] + np.where(is_test, v["timing_s/testing"], 0) + np.where(is_save, v["timing_s/save_checkpoint"], 0)
    wall = wall + rng.uniform(0.5, 2.0, n)
    val_lines = []
    for k, seg in enumerate(spec.segments):
        base = float(np.clip(r0 + (r1 - r0) * (1 - np.exp(-4 * seg.start_step / max(spec.total_steps, 1))), 0, 1))
        arr = np.full(1, base * 0.9)
        val_lines.append((k, seg.start_step, {key: float(_val_value(key, arr, rng)[0]) for key in val_keys}))
    return RunTrace(spec, step, segment, is_test, is_save, keys, values, val_lines, wall)


def _val_value(key: str, base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    metric = key.rsplit("/", 2)[-2:]
    name = "/".join(metric)
    if "std" in name:
        return np.clip(rng.normal(0.3, 0.05, len(base)), 0, 1)
    if name.startswith("best"):
        return np.clip(base + 0.1, 0, 1)
    if name.startswith("worst"):
        return np.clip(base - 0.1, 0, 1)
    return base


def _timings(spec: RunSpec, rng: np.random.Generator, n: int, resp_tokens: np.ndarray, typical_tokens: float,
             episode) -> dict:
    c_gen = rng.uniform(4e-5, 2e-4) * 8 / spec.world_size * max(spec.model_b, 1.0) ** 0.5
    gen_level = typical_tokens * c_gen
    share = {"old_log_prob": (0.06, 0.12), "ref": (0.06, 0.12), "values": (0.06, 0.1),
             "update_critic": (0.15, 0.25), "update_actor": (0.2, 0.35)}
    t = {"gen": resp_tokens * c_gen * rng.lognormal(0, 0.1, n)}
    t["reward"] = gen_level * rng.uniform(0.005, 0.03) * rng.lognormal(0, 0.2, n)
    for name in timers(spec):
        if name in share:
            t[name] = gen_level * rng.uniform(*share[name]) * rng.lognormal(0, 0.08, n)
    t["adv"] = gen_level * rng.uniform(0.001, 0.004) * rng.lognormal(0, 0.2, n)
    for cls, phase in SLOWDOWN_PHASE.items():
        m, mag = episode(cls)
        t[phase] = np.where(m, t[phase] * mag, t[phase])
    t["step"] = sum(t[k] for k in timers(spec) if k != "step") + gen_level * rng.uniform(0.005, 0.03, n)
    t["gen_level"] = gen_level
    return t
