"""Plain-language names for what the reports show: outcomes, stop reasons, config and input facts."""

from __future__ import annotations

from pipeline.vocabulary import ANOMALIES, OTHER_ANOMALY, OTHER_ANOMALY_LABEL

CLASS_LABELS = {
    "completed": "Completed",
    "cuda_oom": "CUDA OOM",
    "nccl_timeout": "NCCL timeout",
    "ray_actor_died": "Ray worker died",
    "host_oom_killed": "Worker killed for host memory",
    "hang": "Hung",
    "interrupted": "Stopped",
    "no_outcome": "No outcome in the log",
    "nan_divergence": "NaN divergence",
    "python_exception": "Python exception",
    "vllm_engine_error": "Rollout engine error",
    "unknown": "Ended for an unknown reason",
}
# run_summary.training_outcome: a training failure that had not recovered, whatever the log's end
TRAINING_LABELS = {
    "collapsed": "Training collapsed",
    "diverged": "Training diverged",
}
# a run's failure_detail, said instead of its class's label: the words the evidence supports
DETAIL_LABELS = {
    "cuda_oom": "CUDA OOM",
    "tpu_hbm_oom": "TPU HBM out of memory",
    "npu_oom": "NPU out of memory",
    "device_oom": "Device out of memory",
    "nccl_watchdog": "NCCL timeout",
    "rendezvous": "Distributed rendezvous failed",
}
STOP_WORDS = {
    "keyboard": "Stopped with Ctrl-C",
    "sigterm": "Stopped by SIGTERM",
    "cancelled": "Cancelled by the scheduler",
    "time_limit": "Stopped at the scheduler's time limit",
    "debugger": "Held at a debugger breakpoint by a person",
}
# the run's configuration as the report lists it, in this order
CONFIG_LABELS = {
    "project_name": "Project",
    "experiment_name": "Experiment",
    "model_path": "Model",
    "adv_estimator": "Algorithm (advantage estimator)",
    "rollout_engine": "Rollout engine",
    "strategy": "Training backend",
    "nnodes": "Nodes",
    "n_gpus_per_node": "GPUs per node",
    "rollout_n": "Responses per prompt (rollout n)",
    "rollout_tp": "Rollout tensor parallel size",
    "train_batch_size": "Prompts per step (train batch size)",
    "ppo_mini_batch_size": "PPO mini-batch size",
    "ppo_micro_batch_size_per_gpu": "PPO micro-batch size per GPU",
    "max_prompt_length": "Longest prompt (tokens)",
    "max_response_length": "Longest response (tokens)",
    "gpu_memory_utilization": "GPU memory given to the rollout engine",
    "actor_lr": "Actor learning rate",
    "total_training_steps": "Training steps planned",
    "test_freq": "Validate every (steps)",
    "save_freq": "Checkpoint every (steps)",
}
# what the ingest found in the input, as the "Data completeness" section words it
COMPLETENESS_LABELS = {
    "source_path": "Archive entry",
    "archive_form": "Archive form",
    "verl_format": "Log format",
    "n_files": "Files read",
    "n_lines": "Lines",
    "n_bytes": "Bytes",
    "n_undecodable_lines": "Lines that were not valid text",
    "n_step_lines": "Step metric lines",
    "n_steps": "Training steps logged",
    "n_metric_values": "Metric values",
    "n_parse_failures": "Metric values that did not parse",
    "n_segments": "Segments (a resume starts a new one)",
    "parse_completeness": "Share of metric values parsed",
}
LINE_KINDS = {
    "step_metrics": "step metric lines",
    "error": "errors and tracebacks",
    "warning": "warnings",
    "config": "configuration",
    "progress": "progress bars",
    "memory": "memory reports",
    "other": "other (not classified)",
}
# an anomaly_class of a step, as a reader would say it (pipeline/vocabulary.py)
ANOMALY_LABELS = {a.name: a.label for a in ANOMALIES} | {OTHER_ANOMALY: OTHER_ANOMALY_LABEL}
# run_events' event_class (its part before ':'); the part after it, an exception's name, is kept as written
EVENT_LABELS = {
    "error_other": "error",
    "warning_other": "warning",
    "disk_pressure": "disk nearly full",
    "python_exception": "Python exception",
    "python_warning": "Python warning",
    "kv_cache_preemption": "KV cache preemption",
    "traceback": "traceback",
    "ray_task_error": "Ray task error",
    "nccl_timeout": "NCCL timeout",
    "nccl_error": "NCCL error",
    "worker_died": "worker died",
    "actor_died": "Ray actor died",
    "nan": "NaN value",
    "hydra_wrapper": "Hydra's error wrapper",
    "ray_metrics_exporter": "Ray metrics exporter",
    "killed_by_signal": "killed by a signal",
    "keyboard_interrupt": "Ctrl-C",
    "time_limit": "scheduler time limit",
    "distributed_init_error": "distributed start-up error",
    "distributed_init_log": "distributed start-up error (torch log line)",
    "import_error": "import error",
    "engine_traceback": "rollout engine traceback",
    "cuda_oom": "CUDA out of memory",
    "device_oom": "device out of memory",
    "vllm_engine_error": "rollout engine error",
    "host_oom_killed": "killed for host memory",
}

# the roles of pipeline/ingest/roles.py: which process wrote a file
ROLE_LABELS = {
    "console": "driver console",
    "ray_worker": "Ray worker log",
    "raylet": "Ray raylet log",
    "ray_system": "Ray system log",
    "inference_server": "inference server log",
    "slurm": "SLURM job output",
    "logger_files": "logger file",
    "tensorboard": "TensorBoard events",
    "metrics_jsonl": "metrics file",
}


def outcome_label(failure_class: str | None, detail: str | None = None) -> str:
    """How a run ended, in the words its evidence supports: the failure_detail's label, else the class's."""
    return DETAIL_LABELS.get(detail or "", CLASS_LABELS.get(failure_class or "unknown", str(failure_class)))


def event_label(event_class: str | None) -> str:
    """An event class in words: 'ray_task_error:OutOfMemoryError' -> 'Ray task error: OutOfMemoryError'."""
    head, _, detail = (event_class or "").partition(":")
    words = EVENT_LABELS.get(head, head.replace("_", " "))
    return f"{words}: {detail}" if detail else words
