"""The design card's vocabularies, declared once: what ended a run, how it was stopped, the phase it was in,
and what an anomalous step shows. SQL, reports, mails and the simulator read them from here."""

from __future__ import annotations

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

# failure_phase: what the run was doing when it ended, in the order of a training step
FAILURE_PHASES = (
    "startup", "gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
    "update_weights", "testing", "save_checkpoint",
)

# anomaly_class of a step; `other` is what the model flags and no rule names
ANOMALY_CLASSES = (
    "kl_spike",
    "nan_loss",
    "grad_explosion",
    "gen_slowdown",
    "old_log_prob_slowdown",
    "update_actor_slowdown",
    "memory_pressure",
    "entropy_collapse",
    "response_length_collapse",
    "reward_collapse",
)
OTHER_ANOMALY = "other"
