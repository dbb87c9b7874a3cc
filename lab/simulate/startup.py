"""The start-up block of a trainer launch: Ray, config pprint, worker init, checkpoint lookup."""

from __future__ import annotations

import time

import numpy as np

from .config_dump import config_pprint_lines, overrides
from .console import Console, hex_id, vllm_ts
from .spec import RunSpec, Segment

WANDB_VERSION = "0.19.8"


def write_launch(con: Console, seg: Segment, first: bool) -> None:
    """From the shell command to the TaskRunner's config pprint."""
    spec, rng = con.spec, con.rng
    if not first:
        # a relaunch after a crash: some time passes, and every process gets a new pid
        con.clock += rng.uniform(300, 7200)
        con.new_processes()
        con.bare("")
    if rng.random() < 0.5:
        con.bare("+ python3 -m verl.trainer.main_ppo " + " ".join(overrides(spec)))
    if spec.fmt == "np2":
        con.bare("ray init kwargs: {'runtime_env': {'env_vars': {'TOKENIZERS_PARALLELISM': 'true', 'NCCL_DEBUG': 'WARN', "
                 "'VLLM_LOGGING_LEVEL': 'WARN', 'VLLM_ALLOW_RUNTIME_LORA_UPDATING': 'true', "
                 "'CUDA_DEVICE_MAX_CONNECTIONS': '1', 'NCCL_CUMEM_ENABLE': '0', 'VLLM_DISABLE_COMPILE_CACHE': '1'}}, "
                 "'num_cpus': None}")
    con.bare(f"{con.ts()} INFO worker.py:{int(rng.choice([1841, 1879, 2003]))} -- Started a local Ray instance. "
             "View the dashboard at 127.0.0.1:8265 ")
    con.clock += rng.uniform(3, 8)
    if spec.runner_name == "TaskRunner":
        con.runner(f"TaskRunner hostname: {spec.hostname}, PID: {con.runner_pid}")
    con.runner(*config_pprint_lines(spec))
    con.runner("Using dataset class: RLHFDataset", f"dataset len: {spec.train_size}",
               "Using dataset class: RLHFDataset", f"dataset len: {spec.val_size}")
    if not spec.has_critic and spec.fmt != "v04":
        con.runner("/opt/verl/verl/trainer/main_ppo.py:227: UserWarning: Disabled critic as algorithm.adv_estimator "
                   "!= gae. If it is not intended, please set critic.enable=True")
    if spec.fmt != "v04":
        con.runner("[validate_config] All configuration checks passed successfully!")
    steps_per_epoch = max(1, spec.train_size // spec.train_batch_size)
    con.runner(f"Size of train dataloader: {steps_per_epoch}, Size of val dataloader: 1",
               f"Total training steps: {spec.total_steps}",
               "colocated worker base class <class 'verl.single_controller.base.worker.Worker'>")


def write_worker_init(con: Console) -> None:
    """Worker model, FSDP and rollout-engine initialisation."""
    spec, rng = con.spec, con.rng
    con.clock += rng.uniform(10, 30)
    con.worker(f"Model config after override: {spec.model_class.replace('ForCausalLM', 'Config')} {{")
    for line in ('  "architectures": [', f'    "{spec.model_class}"', "  ],", '  "torch_dtype": "bfloat16",',
                 '  "transformers_version": "4.51.1",', '  "use_cache": true', "}"):
        con.worker(line)
    con.worker(f"{spec.model_class} contains {spec.model_size} parameters")
    con.worker(f"wrap_policy: functools.partial(<function _or_policy at 0x7f{hex_id(rng, 9)}>, policies=[...])")
    con.worker("NCCL version 2.21.5+cuda12.4")
    con.worker(f"Total steps: {spec.total_steps}, num_warmup_steps: 0")
    con.worker("Actor use_remove_padding=True", repeated=spec.world_size - 1)
    if spec.debug_memory:
        alloc = spec.model_b * 2.1
        con.worker(f"DEBUG:{con.ts()}:Before building {spec.rollout} rollout, memory allocated (GB): {alloc:.2f}, "
                   f"memory reserved (GB): {alloc * 1.4:.2f}, device memory used/total (GB): "
                   f"{alloc * 1.6:.2f}/{spec.gpu_total_gb:.2f}")
        con.clock += rng.uniform(10, 20)
        kv = spec.gpu_total_gb * spec.gpu_memory_utilization
        con.worker(f"DEBUG:{con.ts()}:After building {spec.rollout} rollout, memory allocated (GB): {kv:.2f}, "
                   f"memory reserved (GB): {kv + 0.3:.2f}, device memory used/total (GB): "
                   f"{kv * 0.2:.2f}/{spec.gpu_total_gb:.2f}")
    if spec.rollout == "vllm":
        con.worker(f"WARNING {vllm_ts(con.clock)} [cuda.py:93] To see benefits of async output processing, enable CUDA "
                   "graph. Since, enforce-eager is enabled, async output processor cannot be used",
                   repeated=spec.world_size // spec.tp)
    con.worker("/usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py:690: "
               "FutureWarning: FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated.",
               repeated=spec.world_size)
    if spec.rollout_mode == "agent_loop":
        _write_rollout_servers(con)


def _write_rollout_servers(con: Console) -> None:
    """Async rollout: the HTTP servers' start-up lines, then the agent-loop manager's addresses."""
    spec, rng = con.spec, con.rng
    server = "vLLMHttpServer" if spec.rollout == "vllm" else "SGLangHttpServer"
    replicas = max(1, spec.world_size // spec.tp)
    base = con.runner_pid + 4000 + int(rng.integers(0, 500))
    ports = [int(rng.integers(30000, 60000)) for _ in range(replicas)]
    con.actor("", base - 7, "/usr/local/lib/python3.10/dist-packages/vllm/connections.py:8: RuntimeWarning: "
              "Failed to read commit hash:", repeated=replicas)
    for r in range(replicas):
        devices = ",".join(str(d) for d in range((r * spec.tp) % spec.n_gpus_per_node,
                                                 (r * spec.tp) % spec.n_gpus_per_node + spec.tp))
        if server == "vLLMHttpServer":
            con.actor(server, base + r, f"INFO:{con.ts(1.0 + r)}:vLLMHttpServer, replica_rank: {r}, node_rank: "
                      f"{r * spec.tp // spec.n_gpus_per_node}, CUDA_VISIBLE_DEVICES: {devices}, master_address: "
                      f"{spec.ip}, master_port: {ports[r]}, data_parallel_rpc_port: {ports[r] + 1}, "
                      f"data_parallel_master_port: {ports[r] + 2}")
        else:
            con.actor(server, base + r, f"SGLang http server: rollout_mode=hybrid, replica_rank={r}, "
                      f"node_rank={r * spec.tp // spec.n_gpus_per_node}, nnodes={spec.nnodes}, "
                      f"cuda_visible_devices='{devices}'")
    con.actor("AgentLoopWorker", base + replicas + 3, f"WARNING:{con.ts(5.0)}:Token indices sequence length is "
              "longer than the specified maximum sequence length for this model", repeated=replicas)
    con.runner("AgentLoopManager: [" + ", ".join(f"'{spec.ip}:{p}'" for p in ports) + "]")


def write_checkpoint_lookup(con: Console, seg: Segment) -> None:
    """`Training from scratch`, or the resume lines that set the global step."""
    spec = con.spec
    base = f"/workspace/{spec.project}/checkpoints/{spec.project}/{spec.experiment}"
    if seg.start_step == 0:
        con.runner(f"Checkpoint tracker file does not exist: {base}/latest_checkpointed_iteration.txt",
                   "Training from scratch")
        return
    folder = f"{base}/global_step_{seg.start_step}"
    con.runner(f"Found checkpoint: %s {folder}", f"Load from checkpoint folder: {folder}",
               f"Setting global step to {seg.start_step}", f"Resuming from {folder}")
    con.worker(f"INFO:{con.ts()}:[Rank 0] Loaded model from {folder}/actor/model_world_size_{spec.world_size}_rank_0.pt")


def write_tracking(con: Console) -> None:
    """`Tracking` creates the loggers as `fit()` starts: the file logger, or wandb (whose capture begins here)."""
    spec = con.spec
    if spec.has_jsonl:
        con.runner(f"Creating file logger at ./{spec.project}/{spec.experiment}.jsonl")
    if "wandb" in spec.loggers:
        con.wandb_run, con.wandb_started = wandb_run_name(spec, con.clock), con.clock
        run_key = con.wandb_run.rsplit("-", 1)[1]
        con.runner("wandb: Currently logged in as: verl-user (verl-user-org) to https://api.wandb.ai. Use "
                   "`wandb login --relogin` to force relogin",
                   f"wandb: Tracking run with wandb version {WANDB_VERSION}",
                   f"wandb: Run data is saved locally in /workspace/{spec.project}/wandb/{con.wandb_run}",
                   "wandb: Run `wandb offline` to turn off syncing.",
                   f"wandb: Syncing run {spec.experiment}",
                   f"wandb: ⭐️ View project at https://wandb.ai/verl-user-org/{spec.project}",
                   f"wandb: 🚀 View run at https://wandb.ai/verl-user-org/{spec.project}/runs/{run_key}")
        con.clock += 2.0
        con.start_capture()


def wandb_run_name(spec: RunSpec, started: float) -> str:
    """wandb's run folder name: `run-<YYYYMMDD_HHMMSS>-<8-character run id>`."""
    key = "".join(np.random.default_rng([spec.seed, 53]).choice(list("abcdefghijklmnopqrstuvwxyz0123456789"), 8))
    return time.strftime("run-%Y%m%d_%H%M%S-", time.gmtime(started)) + key
