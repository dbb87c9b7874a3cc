"""The fixes knowledge base says, for each class, what that class is about.

Expectations are written from each class's meaning (docs/architecture.md, DESIGN.md's vocabulary):
a word its summary must use and a setting among its changes, each used by no other class of the
same kind. An entry given to the wrong class, or two entries swapped, fails here.
"""

from __future__ import annotations

import pytest

from pipeline.detect import advice_for
from pipeline.report.advice import advice_entry

# class -> (word of its summary, setting among its changes; None: it changes no setting)
ANOMALY = {
    "kl_spike": ("KL", "actor_rollout_ref.actor.ppo_epochs"),
    "nan_loss": ("NaN", "critic.grad_clip"),
    "grad_explosion": ("Gradient norm", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio"),
    "gen_slowdown": ("timing_s/gen", "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    "old_log_prob_slowdown": ("timing_s/old_log_prob", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
    "update_actor_slowdown": ("timing_s/update_actor", "actor_rollout_ref.actor.ppo_mini_batch_size"),
    "memory_pressure": ("GPU memory", "actor_rollout_ref.model.enable_gradient_checkpointing"),
    "entropy_collapse": ("entropy", "actor_rollout_ref.actor.entropy_coeff"),
    "response_length_collapse": ("response length", "data.max_response_length"),
    "reward_collapse": ("reward", "reward_model / custom_reward_function"),
    "other": ("no rule", None),
}
FAILURE = {
    "completed": ("last step", None),
    "cuda_oom": ("CUDA out of memory", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    "nccl_timeout": ("NCCL", "NCCL_SOCKET_IFNAME"),
    "ray_actor_died": ("Ray worker", "worker logs"),
    "host_oom_killed": ("host memory", "data.dataloader_num_workers"),
    "hang": ("stalled", "ray.get timeout"),
    "interrupted": ("Stopped on purpose", "trainer.resume_mode"),
    "no_outcome": ("no outcome", None),
    "nan_divergence": ("NaN", "actor_rollout_ref.actor.grad_clip"),
    "python_exception": ("Python error", "the traceback's last frame"),
    "vllm_engine_error": ("vLLM", "actor_rollout_ref.rollout.max_num_seqs"),
    "unknown": ("no known failure pattern", None),
}
EXPECTED = {"anomaly": ANOMALY, "failure": FAILURE}


def _detect(kind: str, cls: str) -> tuple[str, list[str]]:
    entry = advice_for(f"{kind}_class", cls)
    return entry["summary"], [c["key"] for c in entry["changes"]]


def _report(kind: str, cls: str) -> tuple[str, list[str]]:
    entry = advice_entry(kind, cls)
    return entry.summary, [c["key"] for c in entry.changes]


READERS = {"detect.advice_for": _detect, "report.advice_entry": _report}
CASES = [(kind, cls) for kind, table in EXPECTED.items() for cls in table]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("kind", "cls"), CASES)
def test_each_class_gets_its_own_advice(reader, kind, cls):
    """The entry read for a class names what the class is about, and nothing another class is about."""
    read = READERS[reader]
    word, setting = EXPECTED[kind][cls]
    summary, keys = read(kind, cls)
    assert word in summary, (cls, summary)
    if setting is None:
        assert not [k for k in keys if k != "-"], (cls, keys)
    else:
        assert setting in keys, (cls, keys)
    for other, (other_word, other_setting) in EXPECTED[kind].items():
        if other != cls:
            assert other_word not in summary, f"{cls}'s advice reads like {other}'s: {summary}"
            assert other_setting not in keys, f"{cls}'s advice changes {other}'s setting {other_setting}"


def test_an_unknown_class_gets_no_advice():
    """A class the knowledge base does not know gets an empty entry, not another class's."""
    assert advice_for("failure_class", "no_such_class") == {"summary": "", "causes": [], "changes": [], "source": []}
    assert not advice_entry("failure", "no_such_class")
    with pytest.raises(ValueError, match="kind must be one of"):
        advice_for("step_class", "kl_spike")
