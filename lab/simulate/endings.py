"""The writer of each failure class: how a run's final launch ends."""

from __future__ import annotations

from .console import Console
from .failures import (
    Failure,
    cuda_oom,
    host_oom_killed,
    nan_divergence,
    nccl_timeout,
    python_exception,
    ray_actor_died,
    unknown,
    vllm_engine_error,
)
from .interrupts import interrupted
from .rendezvous import rendezvous_failure
from .stalls import hang, no_outcome


def distributed_failure(con: Console, phase: str) -> Failure:
    """An NCCL watchdog timeout mid-run, or a failed rendezvous while the rollout engine starts."""
    return rendezvous_failure(con) if phase == "startup" else nccl_timeout(con, phase)


WRITERS = {
    "cuda_oom": cuda_oom,
    "nccl_timeout": distributed_failure,
    "ray_actor_died": ray_actor_died,
    "host_oom_killed": host_oom_killed,
    "hang": hang,
    "nan_divergence": nan_divergence,
    "python_exception": python_exception,
    "vllm_engine_error": vllm_engine_error,
    "interrupted": interrupted,
    "no_outcome": no_outcome,
    "unknown": unknown,
}
