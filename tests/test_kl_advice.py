"""KL advice follows how the run uses KL: in the reward (algorithm.kl_ctrl) or as the actor's loss."""

from __future__ import annotations

from pipeline.report.advice import advice_entry


def _keys(config: dict | None) -> list[str]:
    return [c["key"] for c in advice_entry("anomaly", "kl_spike", config=config).changes]


def test_kl_loss_runs_get_the_loss_coefficient_not_kl_ctrl():
    keys = _keys({"algorithm": {"use_kl_in_reward": False}, "actor_rollout_ref": {"actor": {"use_kl_loss": True}}})
    assert keys[0] == "actor_rollout_ref.actor.kl_loss_coef"
    assert not [k for k in keys if k.startswith("algorithm.kl_ctrl")]


def test_kl_in_reward_runs_get_kl_ctrl():
    keys = _keys({"algorithm": {"use_kl_in_reward": True}, "actor_rollout_ref": {"actor": {"use_kl_loss": False}}})
    assert keys[0] == "algorithm.kl_ctrl.type" and "algorithm.kl_ctrl.kl_coef" in keys
    assert "actor_rollout_ref.actor.kl_loss_coef" not in keys


def test_without_config_only_the_update_size_knobs():
    """ppo_kl measures one update's step: lr, clip and epochs fit it whatever the KL setup."""
    assert _keys(None) == ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.clip_ratio",
                           "actor_rollout_ref.actor.ppo_epochs"]
    summary = advice_entry("anomaly", "kl_spike").summary
    assert "moved the policy from the one that generated the batch" in summary
