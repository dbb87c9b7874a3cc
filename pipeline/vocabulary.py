"""The design card's vocabularies, declared once: what ended a run, how it was stopped, the phase it was in,
and what an anomalous step shows. SQL, reports, mails and the simulator read them from here."""

from __future__ import annotations

from dataclasses import dataclass

# How a run's problem that says it could not be analysed begins (run_summary.sql binds it as $not_analysed)
NOT_ANALYSED = "could not be analysed"

# failure_class of a run (DESIGN.md "Vocabularies"; the rules that pick one are in docs/diagnosis.md)
FAILURE_CLASSES = (
    "completed",
    "cuda_oom",
    "nccl_timeout",
    "ray_actor_died",
    "host_oom_killed",
    "hang",
    "nan_divergence",
    "python_exception",
    "vllm_engine_error",
    "interrupted",
    "no_outcome",
    "unknown",
)
# outcomes that are not failures: the run reached its end, was stopped on purpose, or its log stops short
NOT_FAILED = ("completed", "interrupted", "no_outcome")
FAILED_CLASSES = tuple(c for c in FAILURE_CLASSES if c not in NOT_FAILED)

# stop_reason of an `interrupted` run (`debugger`: a person attached a debugger at a breakpoint and holds it)
STOP_REASONS = ("keyboard", "time_limit", "cancelled", "sigterm", "debugger")

# failure_detail of a run (run_summary): what its root-cause line says beyond the class, where the class's
# words would say more than the evidence (a TPU's HBM is no CUDA memory; a rendezvous is no NCCL collective)
FAILURE_DETAILS = ("cuda_oom", "tpu_hbm_oom", "npu_oom", "device_oom", "nccl_watchdog", "rendezvous")

# verl's timers inside `timing_s/step`, in the order of a training step (step_phases has a column and a share
# for each; the rest of the step is `other`), and those that run after it closes
STEP_PHASES = (
    "gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights",
)
AFTER_STEP_PHASES = ("testing", "save_checkpoint")

# failure_phase: what the run was doing when it ended, in the order of a training step
FAILURE_PHASES = ("startup", *STEP_PHASES, *AFTER_STEP_PHASES)


@dataclass(frozen=True)
class AnomalyClass:
    """An anomaly_class of a step and what every part of the pipeline knows of it: `label`, as a reader would
    say it; `families`, the signal families (detect/signals.FAMILIES) it shows in; `channels`, the channels its
    explanation cites first; `peak`, the channel that shows its peak and the way it moves (+1 up, -1 down)."""

    name: str
    label: str
    families: tuple[str, ...]
    channels: tuple[str, ...] = ()
    peak: tuple[str, int] | None = None


# anomaly_class of a step, in the design's order
ANOMALIES = (
    AnomalyClass("kl_spike", "KL spike", ("policy",), ("ppo_kl",), ("ppo_kl", 1)),
    AnomalyClass("nan_loss", "NaN loss", ("policy", "critic")),
    AnomalyClass("grad_explosion", "Gradient explosion", ("policy",), ("grad_norm",), ("grad_norm", 1)),
    AnomalyClass("gen_slowdown", "Slower generation", ("timing",), ("gen", "throughput"), ("gen", 1)),
    AnomalyClass("old_log_prob_slowdown", "Slower old-log-prob pass", ("timing",), ("old_log_prob", "step_time"),
                 ("old_log_prob", 1)),
    AnomalyClass("update_actor_slowdown", "Slower actor update", ("timing",), ("update_actor", "step_time"),
                 ("update_actor", 1)),
    AnomalyClass("memory_pressure", "Memory pressure", ("memory",), ("mem_reserved_gb", "mem_allocated_gb"),
                 ("mem_reserved_gb", 1)),
    AnomalyClass("entropy_collapse", "Entropy collapse", ("policy",), ("entropy",), ("entropy", -1)),
    AnomalyClass("response_length_collapse", "Response length collapse", ("response", "batch", "timing"),
                 ("response_length_mean",), ("response_length_mean", -1)),
    AnomalyClass("reward_collapse", "Reward collapse", ("reward", "advantage", "critic"), ("reward_mean",),
                 ("reward_mean", -1)),
)
ANOMALY_CLASSES = tuple(a.name for a in ANOMALIES)
# what the model flags and no rule names
OTHER_ANOMALY = "other"
OTHER_ANOMALY_LABEL = "Unusual steps no rule names"
