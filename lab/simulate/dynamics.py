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

    tex = _texture(spec, n, f)
    v: dict[str, np.ndarray] = {}
    # rollout shape
    r0 = rng.uniform(0.05, 0.4)
    r1 = min(0.95, r0 + rng.uniform(0.2, 0.5))
    score = np.clip(r0 + (r1 - r0) * (1 - np.exp(-4 * f)) + rng.normal(0, 0.025, n), 0.0, 1.0)
    m, mag = episode("reward_collapse")
    score = np.where(m, score * mag, score)
    resp0 = spec.max_response_length * spec.response_fraction * rng.lognormal(0, 0.05)
    resp = resp0 * (1 + 0.25 * f) * tex["length_growth"] * noise(0.04)
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

    entropy = rng.uniform(0.3, 0.8) * (1 - 0.35 * f) * noise(0.04) * tex["entropy_trend"]
    m, mag = episode("entropy_collapse")
    v["actor/entropy"] = np.where(m, entropy * mag, entropy)

    ppo_kl = rng.normal(1e-4, 3e-4, n)
    kl_loss = (rng.uniform(5e-4, 2e-3) + 0.01 * f) * noise(0.15)
    clipfrac = rng.uniform(0.001, 0.004) * noise(0.4)
    grad = rng.uniform(0.1, 0.6) * noise(0.25)
    grad = tex["grad_norm"] if tex["grad_norm"] is not None else grad
    m, mag = episode("kl_spike")
    ppo_kl = np.where(m, 0.0075 * mag * noise(0.1), ppo_kl)
    kl_loss = np.where(m, np.maximum(kl_loss * mag, 0.0075 * mag), kl_loss)
    clipfrac = np.where(m, clipfrac * 5, clipfrac)
    grad = np.where(m, grad * 2, grad)
    m, mag = episode("grad_explosion")
    grad = np.where(m, grad * mag * tex["grad_spread"], grad)
    clipfrac = np.where(m, clipfrac * 2, clipfrac)
    rng.normal(0.0, 0.01, n)  # the former policy loss, still drawn so that every later draw keeps its value
    pg_loss = tex["pg_loss"]
    nan_m, nan_mag = episode("nan_loss")

    if spec.has_critic:
        vf_loss = 0.05 * np.exp(-2 * f) * noise(0.2) * tex["critic_tail"]
        vf_loss = np.where(nan_m & (nan_mag > 1), np.nan, vf_loss)
        v["critic/vf_loss"] = vf_loss
        v["critic/vf_clipfrac"] = rng.uniform(0.0, 0.02, n)
        values_mean = score * 0.9 + rng.normal(0, 0.02, n)
        v["critic/vpred_mean"] = values_mean + rng.normal(0, 0.005, n)
        v["critic/grad_norm"] = rng.uniform(5, 40) * noise(0.3) * tex["critic_tail"] ** 0.5
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

    _apply_unnamed(spec, v, step, segment)
    keys = step_keys(spec, per_token)
    values = {k: np.asarray(v[k], dtype=float) for k in keys}
    wall = v["timing_s/step"] + np.where(is_test, v["timing_s/testing"], 0) + np.where(is_save, v["timing_s/save_checkpoint"], 0)
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
    # the recipe's pace, a few percent apart from run to run (other nodes, other data order)
    c_gen = spec.gen_cost * rng.lognormal(0, 0.04) * spec.slowdown
    c_gen *= 8 / spec.world_size * max(spec.model_b, 1.0) ** 0.5
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


def _texture(spec: RunSpec, n: int, f: np.ndarray) -> dict:
    """What makes a healthy run look like a real one, from a stream of its own (the other draws keep
    their values): half the runs log the pre-clip gradient norm, which swings several-fold from step
    to step with heavy tails; the policy loss is a signed number near zero; entropy declines slowly
    while reward rises and responses lengthen; the critic's loss and gradient start high and are
    heavy-tailed."""
    rng = np.random.default_rng([spec.seed, 7920])
    t = lambda: rng.standard_t(4, n)  # noqa: E731
    grad, spread = None, 1.0
    if rng.random() < 0.5:
        # swings of about 2-16 around a few units over a few hundred steps, as real pre-clip norms do
        sigma = rng.uniform(0.25, 0.45)
        grad = rng.uniform(1.5, 6.0) * (1 + rng.uniform(0, 2) * np.exp(-8 * f)) * np.exp(sigma * rng.standard_t(8, n))
        spread = float(np.exp(3 * sigma))  # an explosion stands out of the swings, not just above the median
    loss_scale = float(np.exp(rng.uniform(np.log(0.004), np.log(0.06))))
    drift = 0.5 * loss_scale * np.sin(2 * np.pi * (rng.uniform(1, 4) * f + rng.uniform()))
    return {
        "grad_norm": grad,
        "grad_spread": spread,
        "pg_loss": loss_scale * t() + drift,
        "entropy_trend": (1 - rng.uniform(0.15, 0.6) * f) / (1 - 0.35 * f),
        "length_growth": 1 + spec.length_growth * f,
        "critic_tail": (1 + rng.uniform(0, 8) * np.exp(-20 * f)) * np.exp(0.3 * t()),
    }


def _scale_step_time(v: dict, m: np.ndarray, extra: np.ndarray) -> None:
    """Add `extra` seconds to the steps of `m`, and carry it to the per-step perf figures."""
    old = v["timing_s/step"].copy()
    v["timing_s/step"] = np.where(m, old + extra, old)
    v["perf/time_per_step"] = v["timing_s/step"]
    v["perf/throughput"] = v["perf/throughput"] * old / v["timing_s/step"]


def _critic_divergence(spec, v, m, mag, ramp):
    shift = 0.2 * np.log(mag)
    v["critic/vf_loss"] = np.where(m, v["critic/vf_loss"] * mag, v["critic/vf_loss"])
    v["critic/grad_norm"] = np.where(m, v["critic/grad_norm"] * np.sqrt(mag), v["critic/grad_norm"])
    v["critic/vf_clipfrac"] = np.where(m, np.minimum(0.9, v["critic/vf_clipfrac"] + 0.1 * np.log(mag)),
                                       v["critic/vf_clipfrac"])
    v["critic/vf_explained_var"] = np.where(m, v["critic/vf_explained_var"] - 0.15 * np.log(mag),
                                            v["critic/vf_explained_var"])
    for k in ("critic/vpred_mean", "critic/values/mean", "critic/values/max", "critic/values/min"):
        v[k] = np.where(m, v[k] + shift, v[k])


def _advantage_collapse(spec, v, m, mag, ramp):
    keys = ["critic/advantages/max", "critic/advantages/min", "actor/pg_clipfrac", "actor/pg_loss"]
    if not spec.has_critic:
        keys += ["critic/returns/max", "critic/returns/min"]
    for k in keys:
        v[k] = np.where(m, v[k] * mag, v[k])
    v["actor/grad_norm"] = np.where(m, v["actor/grad_norm"] * np.sqrt(mag), v["actor/grad_norm"])


def _prompt_truncation(spec, v, m, mag, ramp):
    samples = spec.train_batch_size * spec.n
    cut = samples * v["prompt_length/mean"] * (1 - mag)
    ratio = np.where(m, (v["perf/total_num_tokens"] - cut) / v["perf/total_num_tokens"], 1.0)
    for k in ("prompt_length/mean", "prompt_length/max", "prompt_length/min"):
        v[k] = np.where(m, np.round(v[k] * mag, 3 if k.endswith("mean") else 0), v[k])
    v["prompt_length/clip_ratio"] = np.where(m, 0.2 + 0.6 * (1 - mag), v["prompt_length/clip_ratio"])
    for k in [k for k in v if k.startswith("global_seqlen/")] + ["perf/total_num_tokens", "perf/throughput"]:
        v[k] = v[k] * ratio


def _step_overhead(spec, v, m, mag, ramp):
    extra = mag * np.median(v["timing_s/step"])
    if "timing_s/reshard" in v:
        v["timing_s/reshard"] = np.where(m, v["timing_s/reshard"] + 0.8 * extra, v["timing_s/reshard"])
    _scale_step_time(v, m, extra)


def _host_memory_leak(spec, v, m, mag, ramp):
    v["perf/cpu_memory_used_gb"] = np.where(m, v["perf/cpu_memory_used_gb"] * (1 + mag * ramp),
                                            v["perf/cpu_memory_used_gb"])


def _response_truncation(spec, v, m, mag, ramp):
    grow = 1 + 0.3 * mag
    for prefix in ("response_length/", "response_length_non_aborted/"):
        if prefix + "mean" not in v:
            continue
        v[prefix + "clip_ratio"] = np.where(m, mag, v[prefix + "clip_ratio"])
        v[prefix + "max"] = np.where(m, float(spec.max_response_length), v[prefix + "max"])
        v[prefix + "mean"] = np.where(m, v[prefix + "mean"] * grow, v[prefix + "mean"])
    extra = v["timing_s/gen"] * (grow - 1)
    v["timing_s/gen"] = np.where(m, v["timing_s/gen"] + extra, v["timing_s/gen"])
    _scale_step_time(v, m, extra)


def _seqlen_imbalance(spec, v, m, mag, ramp):
    diff = v["global_seqlen/minmax_diff"] * mag
    mean = v["global_seqlen/mean"]
    v["global_seqlen/max"] = np.where(m, np.ceil(mean + 0.6 * diff), v["global_seqlen/max"])
    v["global_seqlen/min"] = np.where(m, np.floor(np.maximum(0, mean - 0.4 * diff)), v["global_seqlen/min"])
    v["global_seqlen/minmax_diff"] = v["global_seqlen/max"] - v["global_seqlen/min"]
    extra = v["timing_s/update_actor"] * 0.02 * mag
    v["timing_s/update_actor"] = np.where(m, v["timing_s/update_actor"] + extra, v["timing_s/update_actor"])
    v["perf/mfu/actor"] = np.where(m, v["perf/mfu/actor"] / (1 + 0.02 * mag), v["perf/mfu/actor"])
    _scale_step_time(v, m, extra)


def _entropy_blowup(spec, v, m, mag, ramp):
    v["actor/entropy"] = np.where(m, v["actor/entropy"] * mag, v["actor/entropy"])
    v["actor/pg_clipfrac"] = np.where(m, v["actor/pg_clipfrac"] * (1 + mag / 2), v["actor/pg_clipfrac"])
    v["response_length/max"] = np.where(m, float(spec.max_response_length), v["response_length/max"])
    v["response_length/clip_ratio"] = np.where(m, np.maximum(v["response_length/clip_ratio"], 0.05 * mag),
                                               v["response_length/clip_ratio"])


def _kl_loss_drift(spec, v, m, mag, ramp):
    v["actor/kl_loss"] = np.where(m, v["actor/kl_loss"] * mag, v["actor/kl_loss"])


def _aborted_rollouts(spec, v, m, mag, ramp):
    v["response/aborted_ratio"] = np.where(m, mag, v["response/aborted_ratio"])
    v["response_length/min"] = np.where(m, 0.0, v["response_length/min"])
    v["response_length/mean"] = np.where(m, v["response_length/mean"] * (1 - 0.3 * mag), v["response_length/mean"])


# What each unnamed kind (lab/simulate/unnamed.py) does to the signals of its steps.
_UNNAMED = {
    "critic_divergence": _critic_divergence,
    "advantage_collapse": _advantage_collapse,
    "prompt_truncation": _prompt_truncation,
    "step_overhead": _step_overhead,
    "host_memory_leak": _host_memory_leak,
    "response_truncation": _response_truncation,
    "seqlen_imbalance": _seqlen_imbalance,
    "entropy_blowup": _entropy_blowup,
    "kl_loss_drift": _kl_loss_drift,
    "aborted_rollouts": _aborted_rollouts,
}


def _apply_unnamed(spec: RunSpec, v: dict, step: np.ndarray, segment: np.ndarray) -> None:
    """Apply the run's episodes of class `other` (kinds no rule names) to its signals."""
    final = segment == len(spec.segments) - 1
    for ep in spec.episodes:
        kind = getattr(ep, "kind", "")
        if not kind:
            continue
        m = final & (step >= ep.first_step) & (step <= ep.last_step)
        ramp = np.clip((step - ep.first_step + 1) / (ep.last_step - ep.first_step + 1), 0.0, 1.0)
        _UNNAMED[kind](spec, v, m, ep.magnitude, ramp)
