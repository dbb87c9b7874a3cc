"""Vocabularies of the design card (from pipeline.vocabulary) and the verl names the simulator draws from."""

from pipeline.vocabulary import ANOMALY_CLASSES, FAILURE_CLASSES, STOP_REASONS

__all__ = ["ANOMALY_CLASSES", "FAILURE_CLASSES", "STOP_REASONS"]

# What shows that a `hang` run stalled (label `hang_evidence`; `hang_reason` says it in words).
HANG_EVIDENCE = ("timestamps", "progress_bar", "debugger", "slurm_idle")

FORMATS = ("np2", "bare", "v04")
ARCHIVE_FORMS = ("dir", "tar.gz", "gz")

# GPUMemoryLogger heads around each phase: (lines before the work, lines after it).
PHASE_HEADS = {
    "gen": (["Before generate_sequences"], ["After generate_sequences"]),
    "old_log_prob": (["Before compute_log_prob"], ["After compute_log_prob"]),
    "ref": (["Before compute_ref_log_prob"], ["After compute_ref_log_prob"]),
    "values": (["dp critic Before compute_values"], ["dp critic After compute_values"]),
    "update_critic": (["dp critic Before update_critic"], ["dp critic After update_critic"]),
    "update_actor": (["Before update_actor", "dp actor Before update_policy"],
                     ["dp actor After update_policy", "After update_actor"]),
}

# Ray remote method each trainer phase calls; a crash inside the phase names it in the traceback.
PHASE_METHOD = {
    "gen": "actor_rollout_generate_sequences",
    "old_log_prob": "actor_rollout_compute_log_prob",
    "ref": "ref_compute_ref_log_prob",
    "values": "critic_compute_values",
    "update_critic": "critic_update_critic",
    "update_actor": "actor_rollout_update_actor",
    "testing": "actor_rollout_generate_sequences",
    "save_checkpoint": "actor_rollout_save_checkpoint",
    "startup": "actor_rollout_init_model",
}

# The trainer-side call in ray_trainer.fit that dispatches each phase.
PHASE_CALL = {
    "gen": ("gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)", 1055),
    "old_log_prob": ("old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)", 1097),
    "ref": ("ref_log_prob = self.ref_policy_wg.compute_ref_log_prob(batch)", 1121),
    "values": ("values = self.critic_wg.compute_values(batch)", 1131),
    "update_critic": ("critic_output = self.critic_wg.update_critic(batch)", 1178),
    "update_actor": ("actor_output = self.actor_rollout_wg.update_actor(batch)", 1190),
    "testing": ("test_output_gen_batch_padded = self.actor_rollout_wg.generate_sequences(test_gen_batch_padded)", 623),
    "save_checkpoint": ("self.actor_rollout_wg.save_checkpoint(", 871),
}

# Worker-side frames under each remote method: (file tail, line, function, source).
PHASE_FRAMES = {
    "gen": [
        ("workers/fsdp_workers.py", 842, "generate_sequences", "output = self.rollout.generate_sequences(prompts=prompts)"),
        ("workers/rollout/vllm_rollout/vllm_rollout_spmd.py", 289, "generate_sequences",
         "outputs = self.inference_engine.generate("),
    ],
    "old_log_prob": [
        ("workers/fsdp_workers.py", 893, "compute_log_prob",
         "output, entropys = self.actor.compute_log_prob(data=data, calculate_entropy=True)"),
        ("workers/actor/dp_actor.py", 338, "compute_log_prob",
         "entropy, log_probs = self._forward_micro_batch("),
        ("workers/actor/dp_actor.py", 176, "_forward_micro_batch", "output = self.actor_module("),
    ],
    "ref": [
        ("workers/fsdp_workers.py", 938, "compute_ref_log_prob",
         "output, _ = self.ref_policy.compute_log_prob(data=data, calculate_entropy=False)"),
        ("workers/actor/dp_actor.py", 338, "compute_log_prob", "entropy, log_probs = self._forward_micro_batch("),
    ],
    "values": [
        ("workers/fsdp_workers.py", 1465, "compute_values", "values = self.critic.compute_values(data=data)"),
        ("workers/critic/dp_critic.py", 171, "compute_values", "values = self._forward_micro_batch(micro_batch)"),
    ],
    "update_critic": [
        ("workers/fsdp_workers.py", 1489, "update_critic", "metrics = self.critic.update_critic(data=data)"),
        ("workers/critic/dp_critic.py", 231, "update_critic", "loss.backward()"),
    ],
    "update_actor": [
        ("workers/fsdp_workers.py", 723, "update_actor", "metrics = self.actor.update_policy(data=data)"),
        ("workers/actor/dp_actor.py", 488, "update_policy", "loss.backward()"),
    ],
    "testing": [
        ("workers/fsdp_workers.py", 842, "generate_sequences", "output = self.rollout.generate_sequences(prompts=prompts)"),
    ],
    "save_checkpoint": [
        ("workers/fsdp_workers.py", 1012, "save_checkpoint", "self.checkpoint_manager.save_checkpoint("),
        ("utils/checkpoint/fsdp_checkpoint_manager.py", 238, "save_checkpoint", "torch.save(model_state_dict, model_path)"),
    ],
    "startup": [
        ("workers/fsdp_workers.py", 612, "init_model", "self.rollout, self.rollout_sharding_manager = self._build_rollout("),
        ("workers/fsdp_workers.py", 512, "_build_rollout", "rollout = vLLMRollout("),
    ],
}

MODELS = (
    ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b", "Qwen2ForCausalLM", "494.03M", 0.5),
    ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b", "Qwen2ForCausalLM", "1.54B", 1.5),
    ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b", "Qwen2ForCausalLM", "3.09B", 3.0),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b", "Qwen2ForCausalLM", "7.62B", 7.0),
    ("Qwen/Qwen3-4B", "qwen3-4b", "Qwen3ForCausalLM", "4.02B", 4.0),
    ("deepseek-ai/deepseek-llm-7b-chat", "deepseek-7b", "LlamaForCausalLM", "6.91B", 7.0),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3.2-3b", "LlamaForCausalLM", "3.21B", 3.0),
)

DATASETS = (
    ("gsm8k", "openai/gsm8k", 7473, 1319, 256),
    ("math", "lighteval/MATH", 7500, 5000, 512),
    ("countdown", "countdown", 32768, 1024, 256),
    ("nq", "nq", 79168, 3610, 512),
)
