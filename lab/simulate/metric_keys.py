"""The metric keys of a verl step line, in the order `RayPPOTrainer.fit` inserts them, per verl era."""

from __future__ import annotations

from .spec import RunSpec

# Printed as plain ints in the np2/bare formats.
INT_KEYS = frozenset({
    "global_seqlen/min", "global_seqlen/max", "global_seqlen/minmax_diff", "global_seqlen/balanced_min",
    "global_seqlen/balanced_max", "training/global_step", "training/epoch", "perf/total_num_tokens",
    "timing_s/agent_loop/slowest/prompt_length", "timing_s/agent_loop/slowest/response_length",
})
NP_INT32_KEYS = frozenset({"num_turns/min", "num_turns/max"})
_PLAIN_ACTOR_KEYS = frozenset({"actor/entropy"})


def is_numpy_typed(key: str) -> bool:
    """True for keys whose value is a numpy scalar in verl, so numpy>=2 prints them as `np.float64(..)`."""
    if key in _PLAIN_ACTOR_KEYS:
        return False
    return key.startswith((
        "actor/", "perf/mfu/", "perf/max_memory", "perf/cpu_memory", "val-", "timing_s/agent_loop/", "num_turns/",
        "critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr",
    )) and key not in INT_KEYS


def validation_keys(spec: RunSpec) -> list[str]:
    """`val-core/*` and `val-aux/*` keys of a validation run (process_validation_metrics order)."""
    n = spec.val_n
    metrics = [f"mean@{n}"]
    if n > 1:
        metrics.append(f"std@{n}")
        for k in (2, n):
            metrics += [f"best@{k}/mean", f"best@{k}/std", f"worst@{k}/mean", f"worst@{k}/std"]
    keys = []
    for var in ("reward", "acc"):
        for m in metrics:
            core = var == "acc" and m.startswith(("mean", "maj", "best")) and f"@{n}" in m
            keys.append(f"{'val-core' if core else 'val-aux'}/{spec.data_source}/{var}/{m}")
    return keys


def timers(spec: RunSpec) -> list[str]:
    """The phase timers of one training step, in the order they finish."""
    names = ["gen", "reward", "old_log_prob"]
    if spec.has_ref:
        names.append("ref")
    if spec.has_critic:
        names.append("values")
    names.append("adv")
    if spec.has_critic:
        names.append("update_critic")
    names += ["update_actor", "step"]
    return names


def gen_subkeys(spec: RunSpec) -> list[str]:
    """Generation sub-timings merged into `timing_s/` (sync SPMD rollout or async agent loop)."""
    if spec.fmt == "v04":
        return []
    if spec.rollout_mode == "agent_loop":
        return [f"agent_loop/{a}/{b}" for a in ("generate_sequences", "tool_calls") for b in ("min", "max", "mean")] + [
            f"agent_loop/slowest/{x}" for x in ("generate_sequences", "tool_calls", "prompt_length", "response_length")]
    return ["generate_sequences", "reshard"]


def step_keys(spec: RunSpec, per_token_order: list[str]) -> list[str]:
    """Every key a training step line can carry, in print order; val/testing/save keys are optional."""
    keys = [f"global_seqlen/{k}" for k in ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")]
    keys.append("actor/entropy")
    if spec.has_critic:
        keys += ["critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "perf/mfu/critic",
                 "critic/lr"]
    keys.append("actor/pg_loss")
    if spec.use_kl_loss:
        keys.append("actor/kl_loss")
    keys += ["actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"]
    if spec.use_kl_loss:
        keys.append("actor/kl_coef")
    keys += ["actor/grad_norm", "perf/mfu/actor", "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb",
             "perf/cpu_memory_used_gb", "actor/lr"]
    keys += validation_keys(spec)
    keys += ["training/global_step", "training/epoch"]
    for group in ("score", "rewards", "advantages", "returns"):
        keys += [f"critic/{group}/{s}" for s in ("mean", "max", "min")]
    if spec.has_critic:
        keys += ["critic/values/mean", "critic/values/max", "critic/values/min", "critic/vf_explained_var"]
    keys += [f"response_length/{s}" for s in ("mean", "max", "min", "clip_ratio")]
    if spec.fmt == "np2":
        keys += [f"response_length_non_aborted/{s}" for s in ("mean", "max", "min", "clip_ratio")]
        keys.append("response/aborted_ratio")
    keys += [f"prompt_length/{s}" for s in ("mean", "max", "min", "clip_ratio")]
    if spec.rollout_mode == "agent_loop" and spec.fmt == "np2":
        keys += ["num_turns/min", "num_turns/max", "num_turns/mean"]
    if spec.fmt != "v04":
        keys.append("timing_s/start_profile")
    keys += [f"timing_s/{k}" for k in gen_subkeys(spec)]
    keys += [f"timing_s/{t}" for t in timers(spec)]
    keys += ["timing_s/testing", "timing_s/save_checkpoint"]
    if spec.fmt != "v04":
        keys.append("timing_s/stop_profile")
    keys += [f"timing_per_token_ms/{t}" for t in per_token_order]
    keys += ["perf/total_num_tokens", "perf/time_per_step", "perf/throughput"]
    return keys
