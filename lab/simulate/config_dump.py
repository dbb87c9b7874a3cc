"""The resolved config verl pprints at start-up, and the Hydra overrides that produced it."""

from __future__ import annotations

import pprint

from .spec import RunSpec


def overrides(spec: RunSpec) -> list[str]:
    """The command-line overrides of the run, as Hydra echoes them."""
    return [
        f"algorithm.adv_estimator={spec.algo}",
        f"data.train_files=$HOME/data/{spec.dataset}/train.parquet",
        f"data.val_files=$HOME/data/{spec.dataset}/test.parquet",
        f"data.train_batch_size={spec.train_batch_size}",
        f"data.max_prompt_length={spec.max_prompt_length}",
        f"data.max_response_length={spec.max_response_length}",
        f"actor_rollout_ref.model.path={spec.model_path}",
        f"actor_rollout_ref.actor.optim.lr={spec.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={spec.ppo_micro_batch_size_per_gpu}",
        f"actor_rollout_ref.actor.use_kl_loss={spec.use_kl_loss}",
        f"actor_rollout_ref.rollout.name={spec.rollout}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={spec.tp}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={spec.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.n={spec.n}",
        "trainer.logger=[" + ",".join(f"'{name}'" for name in spec.loggers) + "]",
        f"trainer.project_name={spec.project}",
        f"trainer.experiment_name={spec.experiment}",
        f"trainer.n_gpus_per_node={spec.n_gpus_per_node}",
        f"trainer.nnodes={spec.nnodes}",
        f"trainer.save_freq={spec.save_freq}",
        f"trainer.test_freq={spec.test_freq}",
        f"trainer.total_training_steps={spec.total_steps}",
    ]


def resolved_config(spec: RunSpec) -> dict:
    """A realistic `OmegaConf.to_container(config, resolve=True)` for the run."""
    new = spec.fmt != "v04"
    optim = {"lr": spec.lr, "lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": 0.0,
             "num_cycles": 0.5, "total_training_steps": spec.total_steps, "warmup_style": "constant",
             "weight_decay": 0.01}
    if new:
        optim["_target_"] = "verl.workers.config.FSDPOptimizerConfig"
    fsdp = {"fsdp_size": -1, "optimizer_offload": False, "param_offload": False, "wrap_policy": {"min_num_params": 0}}
    actor = {
        "checkpoint": {"load_contents": ["model", "optimizer", "extra"], "save_contents": ["model", "optimizer", "extra"]},
        "clip_ratio": 0.2, "clip_ratio_c": 3.0, "clip_ratio_high": 0.2, "clip_ratio_low": 0.2,
        "entropy_coeff": 0, "fsdp_config": fsdp, "grad_clip": 1.0, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl",
        "loss_agg_mode": "token-mean", "optim": optim, "ppo_epochs": 1, "ppo_max_token_len_per_gpu": 16384,
        "ppo_micro_batch_size": None, "ppo_micro_batch_size_per_gpu": spec.ppo_micro_batch_size_per_gpu,
        "ppo_mini_batch_size": spec.ppo_mini_batch_size, "shuffle": False, "strategy": "fsdp",
        "ulysses_sequence_parallel_size": 1, "use_dynamic_bsz": False, "use_kl_loss": spec.use_kl_loss,
        "use_torch_compile": True,
    }
    if new:
        actor["_target_"] = "verl.workers.config.FSDPActorConfig"
    rollout = {
        "do_sample": True, "dtype": "bfloat16", "enable_chunked_prefill": True, "enforce_eager": True,
        "free_cache_engine": True, "gpu_memory_utilization": spec.gpu_memory_utilization, "ignore_eos": False,
        "load_format": "dummy_dtensor", "log_prob_micro_batch_size_per_gpu": spec.ppo_micro_batch_size_per_gpu * 2,
        "max_num_batched_tokens": 8192, "max_num_seqs": 1024, "mode": "async" if spec.rollout_mode == "agent_loop" else "sync",
        "n": spec.n, "name": spec.rollout, "prompt_length": spec.max_prompt_length,
        "response_length": spec.max_response_length, "temperature": 1.0, "tensor_model_parallel_size": spec.tp,
        "top_k": -1, "top_p": 1, "val_kwargs": {"do_sample": spec.val_n > 1, "n": spec.val_n, "temperature": 0,
                                              "top_k": -1, "top_p": 1.0},
    }
    model = {"enable_gradient_checkpointing": True, "external_lib": None, "override_config": {},
             "path": spec.model_path, "use_remove_padding": True}
    critic_optim = dict(optim, lr=1e-5)
    return {
        "actor_rollout_ref": {"actor": actor, "hybrid_engine": True, "model": model,
                              "ref": {"fsdp_config": {"param_offload": True, "wrap_policy": {"min_num_params": 0}},
                                      "log_prob_micro_batch_size_per_gpu": spec.ppo_micro_batch_size_per_gpu * 2,
                                      "strategy": "fsdp"},
                              "rollout": rollout},
        "algorithm": {"adv_estimator": spec.algo, "gamma": 1.0, "kl_ctrl": {"kl_coef": 0.001, "type": "fixed"},
                      "kl_penalty": "kl", "lam": 1.0, "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False},
        "critic": {"enable": spec.has_critic, "model": {"path": spec.model_path}, "optim": critic_optim,
                   "ppo_micro_batch_size_per_gpu": spec.ppo_micro_batch_size_per_gpu,
                   "ppo_mini_batch_size": spec.ppo_mini_batch_size, "strategy": "fsdp"},
        "data": {"filter_overlong_prompts": True, "max_prompt_length": spec.max_prompt_length,
                 "max_response_length": spec.max_response_length, "prompt_key": "prompt", "shuffle": True,
                 "train_batch_size": spec.train_batch_size, "train_files": f"/data/{spec.dataset}/train.parquet",
                 "truncation": "error", "val_files": f"/data/{spec.dataset}/test.parquet"},
        "reward_model": {"enable": False, "reward_manager": "naive"},
        "trainer": {
            "balance_batch": True, "critic_warmup": 0,
            "default_local_dir": f"checkpoints/{spec.project}/{spec.experiment}",
            "experiment_name": spec.experiment, "logger": spec.loggers,
            "n_gpus_per_node": spec.n_gpus_per_node, "nnodes": spec.nnodes, "project_name": spec.project,
            "resume_mode": "auto", "save_freq": spec.save_freq, "test_freq": spec.test_freq,
            "total_epochs": 30, "total_training_steps": spec.total_steps, "val_before_train": True,
        },
    }


def config_pprint_lines(spec: RunSpec) -> list[str]:
    """The config as `pprint` prints it: sorted keys, wrapped at 80 columns."""
    return pprint.pformat(resolved_config(spec), width=80).split("\n")
