"""KL advice follows how the run uses KL: in the reward (algorithm.kl_ctrl) or as the actor's loss."""

from __future__ import annotations

from test_run_advice import config, rows_of, write_episode, write_run

A = "actor_rollout_ref__actor__"


def _settings(tmp_path, **cfg) -> list[str]:
    write_run(tmp_path, "r", "completed", None, config(**cfg))
    write_episode(tmp_path, "r", "kl_spike", range(20, 26), "ppo_kl 2.66 at step 23")
    return [r["setting"] for r in rows_of(tmp_path, ["r"])["r"] if r["episode_id"] == 1 and r["setting"]]


def test_kl_loss_runs_get_the_loss_coefficient_not_kl_ctrl(tmp_path):
    keys = _settings(tmp_path, **{"algorithm__use_kl_in_reward": False, A + "use_kl_loss": True,
                                  A + "kl_loss_coef": 0.001})
    assert "actor_rollout_ref.actor.kl_loss_coef" in keys
    assert not [k for k in keys if k.startswith("algorithm.kl_ctrl")]


def test_kl_in_reward_runs_get_kl_ctrl(tmp_path):
    keys = _settings(tmp_path, **{"algorithm__use_kl_in_reward": True, A + "use_kl_loss": False,
                                  "algorithm__kl_ctrl__kl_coef": 0.001})
    assert "algorithm.kl_ctrl.kl_coef" in keys
    assert "actor_rollout_ref.actor.kl_loss_coef" not in keys


def test_without_kl_control_only_the_update_size_knobs(tmp_path):
    """ppo_kl measures one update's step: lr and clip fit it whatever the KL setup; ppo_epochs already 1 is kept."""
    keys = _settings(tmp_path, **{A + "optim__lr": 1e-6, A + "clip_ratio": 0.2, A + "ppo_epochs": 1})
    assert keys == ["actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.clip_ratio"]
