"""Short verl logs written the way other real runs print them (other verl versions, prefixes, engines,
schedulers, failures in each phase), with the outcome a careful reader gives each from the text.

The expected values come from ../shared/reference/verl-log-formats.md (what verl prints) and the
vocabulary and precedence rule of ../shared/DESIGN.md, never from running the pipeline. Each case is
small and made of the lines that matter, with the noise real runs carry around them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

ESC = "\x1b"
CYAN, YELLOW, RESET = f"{ESC}[36m", f"{ESC}[33m", f"{ESC}[0m"


@dataclass(frozen=True)
class Case:
    """One log and the outcome a reader gives it (DESIGN.md's vocabulary)."""

    name: str
    text: str
    failure_class: str
    last_step: int
    phase: str | None
    stop_reason: str | None = None
    root: str | None = None  # a verbatim piece of the causal line


def prefix(style: str, proc: str = "TaskRunner", pid: int = 3165) -> str:
    """A Ray line prefix in one of the forms verl's logs carry."""
    if style == "none":
        return ""
    if style == "ansi":
        return f"{CYAN}({proc} pid={pid}){RESET} "
    if style == "ip":
        return f"({proc} pid={pid}, ip=10.0.3.7) "
    return f"({proc} pid={pid}) "


def fmt(v: float, number: str, np_type: bool) -> str:
    """A value as verl prints it: `np2` wraps numpy scalars, `bare` is the repr, `v04` is `%.3f`."""
    if number == "v04":
        return f"{v:.3f}"
    if number == "np2" and np_type:
        return f"np.float64({v!r})"
    return repr(v)


def step_line(step: int, number: str = "np2", pre: str = "", timers: dict[str, float] | None = None,
              extra: dict[str, float] | None = None, old_keys: bool = False) -> str:
    """A console step line (§1 of the formats reference) with the usual keys in verl's order."""
    t = {"gen": 40.0 + step % 3, "reward": 0.8, "old_log_prob": 9.5, "ref": 8.7, "adv": 0.05,
         "update_actor": 31.0, "step": 90.5 + step % 3}
    if timers:
        t.update(timers)
    pairs: list[tuple[str, float, bool]] = [
        ("global_seqlen/min", 69484, False), ("global_seqlen/mean", 70211.5, False),
        ("actor/entropy", 0.52 - step * 0.001, False),
        ("actor/pg_loss", -0.0006 + step * 1e-5, True), ("actor/kl_loss", 0.0012, True),
        ("actor/pg_clipfrac", 0.0044, True), ("actor/ppo_kl", 0.0002, True),
        ("actor/grad_norm", 0.21 + step * 0.001, True), ("perf/mfu/actor", 0.31, True),
        ("perf/max_memory_allocated_gb", 41.2, True), ("actor/lr", 1e-06, True),
        ("training/global_step", step, False), ("training/epoch", 0, False),
        ("critic/score/mean", 0.4 + step * 0.002, False), ("critic/rewards/mean", 0.4 + step * 0.002, False),
        ("response_length/mean", 512.25, False), ("response_length/clip_ratio", 0.02, False),
    ]
    if old_keys:  # early-2025 verl: other key names (§1.3)
        pairs += [("critic/kl", 0.0003, False), ("mfu/actor", 0.3, False)]
    if extra:  # values that replace the usual ones (NaN losses), or more keys
        pairs = [(k, extra.pop(k), n) if k in extra else (k, v, n) for k, v, n in pairs]
        pairs += [(k, v, True) for k, v in extra.items()]
    pairs += [(f"timing_s/{k}", v, False) for k, v in t.items()]
    pairs += [("perf/total_num_tokens", 561692, False), ("perf/time_per_step", t["step"], False)]
    body = " - ".join(f"{k}:{fmt(float(v) if number == 'v04' else v, number, np_)}" for k, v, np_ in pairs)
    return f"{pre}step:{step} - {body}"


def val_line(step: int, number: str = "np2", pre: str = "") -> str:
    """The validation-only step line (`step:0` before training, or the resumed step)."""
    v = fmt(0.4123, number, True)
    return (f"{pre}step:{step} - val-aux/openai/gsm8k/reward/mean@1:{v} - "
            f"val-core/openai/gsm8k/acc/mean@1:{v}")


def bar(n: int, total: int, elapsed: str, pre: str = "", rate: str = "92.10s/it", left: str = "?") -> str:
    """verl's `Training Progress` tqdm bar."""
    pct = int(100 * n / total)
    return f"{pre}Training Progress:  {pct}%|▍         | {n}/{total} [{elapsed}<{left}, {rate}]"


def startup(pre: str = "", total: int = 100, strategy: str = "fsdp", engine: str = "vllm") -> list[str]:
    """What a run prints before its first step: Ray, the config dump, datasets, worker init."""
    return [
        "2025-06-01 09:58:01,112\tINFO worker.py:1832 -- Started a local Ray instance. View the dashboard at "
        "127.0.0.1:8265 ",
        f"{pre}TaskRunner hostname: gpu-node-12, PID: 3165",
        f"{pre}{{'actor_rollout_ref': {{'actor': {{'strategy': '{strategy}',",
        f"{pre}                                 'ppo_mini_batch_size': 256}},",
        f"{pre}                       'rollout': {{'name': '{engine}', 'n': 8,",
        f"{pre}                                   'tensor_model_parallel_size': 2}}}},",
        f"{pre} 'trainer': {{'total_epochs': 15, 'save_freq': 20, 'test_freq': 5}}}}",
        f"{pre}Using dataset class: RLHFDataset",
        f"{pre}dataset len: 7473",
        f"{pre}[validate_config] All configuration checks passed successfully!",
        f"{pre}Size of train dataloader: 29, Size of val dataloader: 1",
        f"{pre}Total training steps: {total}",
        f"{pre}colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
        f"{prefix('plain', 'WorkerDict', 4001)}Qwen2ForCausalLM contains 1.54B parameters",
        f"{pre}Checkpoint tracker file does not exist: /ckpt/verl_examples/gsm8k/latest_checkpointed_iteration.txt",
        f"{pre}Training from scratch",
    ]


def validation(step: int = 0, number: str = "np2", pre: str = "") -> list[str]:
    """The initial validation: its notices, its pprint and its step line."""
    return [
        f"{pre}test_gen_batch meta info: {{'eos_token_id': 151643, 'pad_token_id': 151643, "
        f"'recompute_log_prob': False, 'do_sample': False, 'validate': True, 'global_steps': {step}}}",
        f"{pre}validation generation end",
        f"{pre}(\"Initial validation metrics: {{'val-aux/openai/gsm8k/reward/mean@1': \"",
        f"{pre} \"0.4123, 'val-core/openai/gsm8k/acc/mean@1': 0.4123}}\")",
        val_line(step, number, pre),
    ]


def driver_traceback(calls: list[str], worker_call: str | None, worker_frames: list[str], exc: str,
                     exc_type: str, worker: str = "WorkerDict.actor_rollout_generate_sequences") -> list[str]:
    """The driver's Hydra-wrapped traceback of a Ray task error (§6.2), frames innermost last."""
    lines = [
        "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=256', "
        "'actor_rollout_ref.rollout.name=vllm', 'trainer.n_gpus_per_node=8']",
        "Traceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 42, in main',
        "    run_ppo(config)",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 2771, in get',
        "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 919, in get_objects',
        "    raise value.as_instanceof_cause()",
        f"ray.exceptions.RayTaskError({exc_type}): ray::TaskRunner.run() (pid=3165, ip=10.0.3.7, "
        "actor_id=5066c201b724a3936948a11201000000, repr=<main_ppo.TaskRunner object at 0x7f450cc6c310>)",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 317, in run',
        "    trainer.fit()",
    ]
    lines += calls
    if worker_call is not None:
        lines += [
            '  File "/workspace/verl/verl/single_controller/ray/base.py", line 50, in __call__',
            "    output = ray.get(output)",
            f"ray.exceptions.RayTaskError({exc_type}): ray::{worker}() (pid=4001, ip=10.0.3.7, "
            "actor_id=d2209bc23ff048efb340dd9001000000, repr=<verl.single_controller.ray.base.WorkerDict object "
            "at 0x152530529600>)",
            '  File "/workspace/verl/verl/single_controller/ray/base.py", line 705, in func',
            "    return getattr(self.worker_dict[key], name)(*args, **kwargs)",
            '  File "/workspace/verl/verl/single_controller/base/decorator.py", line 514, in inner',
            "    return func(*args, **kwargs)",
        ]
        lines += worker_frames
    lines += [exc, "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]
    return lines


def init_failure(worker_frames: list[str], exc: str, exc_type: str) -> list[str]:
    """The driver's traceback of a worker failing in `init_model` (start-up: model and engine init)."""
    return driver_traceback(
        frame("/workspace/verl/verl/trainer/main_ppo.py", 303, "run", "trainer.init_workers()")
        + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 871, "init_workers",
                "self.actor_rollout_wg.init_model()"),
        "init_model", worker_frames, exc, exc_type, "WorkerDict.actor_rollout_init_model")


def gen_failure(inner_frames: list[str], exc: str, exc_type: str) -> list[str]:
    """The driver's traceback of a worker failing in `generate_sequences` (the rollout), engine frames inside."""
    return driver_traceback(fit_frame(1061, "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)"),
                            "generate_sequences",
                            frame(FSDP, 811, "generate_sequences", "output = self.rollout.generate_sequences(prompts)")
                            + inner_frames, exc, exc_type)


def fit_frame(line: int, code: str) -> list[str]:
    """A frame of `RayPPOTrainer.fit` and its source line."""
    return [f'  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line {line}, in fit', f"    {code}"]


def frame(path: str, line: int, func: str, code: str) -> list[str]:
    """Any traceback frame and its source line."""
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


# the driver's own traceback when the user presses Ctrl-C while it waits on the trainer
CTRL_C = ["Traceback (most recent call last):",
          '  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo',
          "    ray.get(runner.run.remote(config))",
          "KeyboardInterrupt"]
FSDP = "/workspace/verl/verl/workers/fsdp_workers.py"
MEGATRON = "/workspace/verl/verl/workers/megatron_workers.py"
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 13.91 GiB. GPU 0 has a total capacity of "
       "79.11 GiB of which 8.85 GiB is free. Including non-PyTorch memory, this process has 70.25 GiB memory in "
       "use. Of the allocated memory 60.49 GiB is allocated by PyTorch, and 6.77 GiB is reserved by PyTorch but "
       "unallocated.")
ACTOR_DIED = [
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
    "\tactor_id: 5066c201b724a3936948a11201000000",
    "\tpid: 87687",
    "\tname: 07GxnAWorkerDict_0:3",
    "\tnamespace: b8860f81-d334-496c-a8f4-c7ed6a6b49f3",
    "\tip: 10.29.214.5",
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) the "
    "process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called, or (3) the "
    "worker crashed unexpectedly due to SIGSEGV or another unexpected error.",
]


def actor_died(fit_line: int, fit_code: str, method: str,
               worker: str = "WorkerDict.actor_rollout_generate_sequences") -> list[str]:
    """The driver's traceback of a worker that died inside `method` (Ray's ActorDiedError and its details)."""
    return driver_traceback(fit_frame(fit_line, fit_code), method, [], ACTOR_DIED[0], "ActorDiedError",
                            worker)[:-3] + ACTOR_DIED + [
        "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]


def steps(first: int, last: int, number: str = "np2", pre: str = "", total: int = 100, t0: str = "00:00",
          **kw) -> list[str]:
    """Step lines first..last, each after its bar update (the bar counts the steps done)."""
    out = []
    for s in range(first, last + 1):
        out.append(step_line(s, number, pre, **kw))
        out.append(bar(s, total, _clock(s * 92), pre))
    return out


def trained_to(last: int, number: str = "np2", pre: str = "", total: int = 100) -> list[str]:
    """A run from its start through the initial validation to step `last`, as verl prints it."""
    return startup(pre, total=total) + validation(0, number, pre) + steps(1, last, number, pre, total=total)


def resumed_at(step: int, pre: str, total: int = 200) -> list[str]:
    """A run resuming from the checkpoint of `step`: its validation repeats that step, the bar starts there."""
    return startup(pre, total=total)[:-1] + [
        f"{pre}Load from checkpoint folder: /ckpt/verl_examples/gsm8k/global_step_{step}",
        f"{pre}Setting global step to {step}",
        *validation(step, "np2", pre), bar(step, total, "00:00", pre, "?it/s")]


def _clock(seconds: int) -> str:
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def logged(t: datetime, level: str, msg: str, pre: str = "") -> str:
    """A Python logging line as verl's basicConfig prints it: `LEVEL:YYYY-MM-DD HH:MM:SS,mmm:msg`."""
    return f"{pre}{level}:{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}:{msg}"


def _lines(parts: tuple[list[str] | str, ...]) -> list[str]:
    out: list[str] = []
    for p in parts:
        out += [p] if isinstance(p, str) else p
    return out


def join(*parts: list[str] | str) -> str:
    """Lines joined into a log's text."""
    return "\n".join(_lines(parts)) + "\n"


def prefixed(pre: str, *parts: list[str] | str) -> list[str]:
    """Lines one process printed, each behind that process's prefix `pre`."""
    return [pre + line for line in _lines(parts)]


T0 = datetime(2025, 6, 1, 10, 0, 0)
TR = prefix("plain")
TRA = prefix("ansi")
W = prefix("plain", "WorkerDict", 4001)
WIP = prefix("ip", "WorkerDict", 4002)


def _first_cases() -> list[Case]:
    c: list[Case] = []

    # --- completed runs -------------------------------------------------------------------------------
    c.append(Case("completed_np2_ansi_final_validation", join(
        startup(TRA, total=3), validation(0, "np2", TRA), bar(0, 3, "00:00", TRA, "?it/s"),
        steps(1, 3, "np2", TRA, total=3, timers={"testing": 21.2, "save_checkpoint": 12.0}),
        f"{TRA}(\"Final validation metrics: {{'val-aux/openai/gsm8k/reward/mean@1': \"",
        f"{TRA} \"0.5123, 'val-core/openai/gsm8k/acc/mean@1': 0.5123}}\")",
        "wandb: Run summary:", "wandb:   actor/entropy 0.51",
        "wandb: 🚀 View run qwen2.5-1.5b-grpo at: https://wandb.ai/team/verl/runs/abc123",
    ), "completed", 3, None))
    c.append(Case("completed_v04_main_task_no_bar", join(
        startup(prefix("plain", "main_task", 12), total=5),
        val_line(0, "v04", prefix("plain", "main_task", 12)),
        [step_line(s, "v04", prefix("plain", "main_task", 12), old_keys=True) for s in range(1, 6)],
    ), "completed", 5, None))
    c.append(Case("completed_bar_only_wandb_logger", join(
        startup(TR, total=40), bar(0, 40, "00:00", TR, "?it/s"),
        [bar(s, 40, _clock(s * 70), TR, "70.02s/it") for s in range(1, 41)],
        f"{TR}(\"Final validation metrics: {{'val-core/openai/gsm8k/acc/mean@1': 0.61}}\")",
    ), "completed", 40, None))
    c.append(Case("completed_then_raylet_sigterm_at_exit", join(
        startup("", total=4), validation(0, "bare"), steps(1, 4, "bare", total=4),
        f"{YELLOW}(raylet){RESET} A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffff Worker ID: 1b0d "
        "Node ID: cc69 Worker IP address: 10.0.3.7 Worker port: 10003 Worker PID: 4001 Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: The leased worker has unrecoverable failure. Worker is requested to be "
        "destroyed when it is returned. RPC Error message: Socket closed; The process receives a SIGTERM.",
    ), "completed", 4, None))

    # --- out of memory in each phase ------------------------------------------------------------------
    def oom_in(name: str, fit_code: str, worker: str, frames: list[str], phase: str, pre: str = TR,
               number: str = "np2", path_steps: int = 3) -> Case:
        text = join(
            startup(pre), validation(0, number, pre), steps(1, path_steps, number, pre),
            f"{W}Traceback (most recent call last):",  # the worker's own copy of the error, printed first
            *(f"{W}{ln}" for ln in frames),
            f"{W}{OOM}",
            driver_traceback(fit_frame(1061, fit_code), fit_code, frames, OOM, "OutOfMemoryError", worker),
        )
        return Case(name, text, "cuda_oom", path_steps, phase, root="CUDA out of memory")

    c.append(oom_in("oom_gen_vllm", "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)",
                    "WorkerDict.actor_rollout_generate_sequences",
                    frame(FSDP, 811, "generate_sequences", "output = self.rollout.generate_sequences(prompts=prompts)")
                    + frame("/usr/local/lib/python3.10/dist-packages/vllm/worker/model_runner.py", 1654,
                            "execute_model", "hidden_or_intermediate_states = model_executable("), "gen"))
    c.append(oom_in("oom_old_log_prob_bare", "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)",
                    "WorkerDict.actor_rollout_compute_log_prob",
                    frame(FSDP, 893, "compute_log_prob", "output, entropys = self.actor.compute_log_prob(data=data)")
                    + frame("/workspace/verl/verl/workers/actor/dp_actor.py", 341, "compute_log_prob",
                            "entropy, log_probs = self._forward_micro_batch("), "old_log_prob", number="bare"))
    c.append(oom_in("oom_ref_megatron", "ref_log_prob = self.ref_policy_wg.compute_ref_log_prob(batch)",
                    "WorkerDict.ref_compute_ref_log_prob",
                    frame(MEGATRON, 702, "compute_ref_log_prob", "output, _ = self.ref_policy.compute_log_prob(data)")
                    + frame("/workspace/verl/verl/workers/actor/megatron_actor.py", 233, "compute_log_prob",
                            "output = self.forward_backward_batch("), "ref", pre=TRA))
    c.append(oom_in("oom_values", "values = self.critic_wg.compute_values(batch)",
                    "WorkerDict.critic_compute_values",
                    frame(FSDP, 1402, "compute_values", "values = self.critic.compute_values(data=data)"),
                    "values", number="v04"))
    c.append(oom_in("oom_update_critic", "critic_output = self.critic_wg.update_critic(batch)",
                    "WorkerDict.critic_update_critic",
                    frame(FSDP, 1431, "update_critic", "metrics = self.critic.update_critic(data=data)")
                    + frame("/workspace/verl/verl/workers/critic/dp_critic.py", 241, "update_critic",
                            "loss.backward()"), "update_critic"))
    c.append(oom_in("oom_update_actor_megatron", "actor_output = self.actor_rollout_wg.update_actor(batch)",
                    "WorkerDict.actor_rollout_update_actor",
                    frame(MEGATRON, 560, "update_actor", "metrics = self.actor.update_policy(dataloader=dataloader)")
                    + frame("/workspace/verl/verl/workers/actor/megatron_actor.py", 602, "update_policy",
                            "metric_micro_batch = self.forward_backward_batch("), "update_actor", path_steps=17))
    c.append(Case("oom_at_init_model", join(
        startup(TR),
        init_failure(frame(FSDP, 612, "init_model", "self.rollout, self.rollout_sharding_manager = "
                           "self._build_rollout("), OOM, "OutOfMemoryError"),
    ), "cuda_oom", 0, "startup", root="CUDA out of memory"))
    c.append(Case("oom_sglang_memory_saver_gen", join(
        startup(TR, engine="sglang"), validation(0, "np2", TR), steps(1, 6, "np2", TR),
        f"{prefix('plain', 'SGLangHttpServer', 250977)}[torch_memory_saver.cpp] CUresult error: 2 (out of memory)  "
        "file=csrc/utils.h func=cu_mem_create line=194",
        driver_traceback(fit_frame(1061, "gen_batch_output = self.async_rollout_manager.generate_sequences(gen_batch)")
                         + frame("/workspace/verl/verl/experimental/agent_loop/agent_loop.py", 712,
                                 "generate_sequences", "outputs = ray.get([worker.generate_sequences.remote(chunk)"),
                         None, [], "RuntimeError: CUresult error: 2 (out of memory)", "RuntimeError"),
    ), "cuda_oom", 6, "gen", root="CUresult error: 2 (out of memory)"))

    # --- communication ---------------------------------------------------------------------------------
    c.append(Case("nccl_watchdog_in_update_actor", join(
        trained_to(20, "np2", TR),
        "[rank7]:[E419 10:42:28.858931807 ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4486, OpType=ALLREDUCE, NumelIn=46684160, NumelOut=46684160, Timeout(ms)=600000) "
        "ran for 600013 milliseconds before timing out.",
        "[rank7]:[E419 10:42:28.861967180 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 9 Rank 7] Exception (either "
        "an error or timeout) detected by watchdog at work: 4486, last enqueued NCCL work: 4489, last completed "
        "NCCL work: 4485.",
        f"{WIP}[2025-06-01 10:42:28,861 E 230966 231591] logging.cc:113: Unhandled exception: "
        "N3c1016DistBackendErrorE. what(): [PG 0 (default_pg) Rank 0] Process group watchdog thread terminated "
        "with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600051 milliseconds before timing out.",
        actor_died(1143, "actor_output = self.actor_rollout_wg.update_actor(batch)", "update_actor",
                   "WorkerDict.actor_rollout_update_actor"),
    ), "nccl_timeout", 20, "update_actor", root="Watchdog caught collective operation timeout"))
    c.append(Case("c10d_socket_timeout_vllm_startup", join(
        startup(TR),
        f"{W}[W601 10:01:12.000000000 socket.cpp:755] [c10d] The client socket has timed out after 600000ms "
        "while trying to connect to (10.0.3.9, 29500).",
        init_failure(frame(FSDP, 612, "init_model", "self.rollout = self._build_rollout(")
                     + frame("/usr/local/lib/python3.10/dist-packages/vllm/distributed/parallel_state.py", 1101,
                             "init_distributed_environment", "torch.distributed.init_process_group("),
                     "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while "
                     "trying to connect to (10.0.3.9, 29500).", "DistNetworkError"),
    ), "nccl_timeout", 0, "startup", root="The client socket has timed out"))

    # --- Ray actors and host memory --------------------------------------------------------------------
    c.append(Case("actor_died_compute_log_prob_ip_prefix", join(
        trained_to(8, "bare", prefix("ip")),
        f"{YELLOW}(raylet){RESET} A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR",
        actor_died(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)", "compute_log_prob",
                   "WorkerDict.actor_rollout_compute_log_prob"),
    ), "ray_actor_died", 8, "old_log_prob", root="The actor died unexpectedly"))
    c.append(Case("raylet_oom_killer_then_actor_died", join(
        trained_to(12, "np2", TR),
        f"{YELLOW}(raylet){RESET} [2025-06-01 11:57:19,206 E 393463 393463] (raylet) node_manager.cc:3277: 2 "
        "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at "
        "node (ID: 4748aa6d, IP: 10.0.3.7) over the last time period. To see more information about the Workers "
        "killed on this node, use `ray logs raylet.out -ip 10.0.3.7`",
        actor_died(1061, "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)", "generate_sequences"),
    ), "host_oom_killed", 12, "gen", root="killed due to memory pressure"))
    c.append(Case("ray_memory_monitor_oom_in_gen", join(
        trained_to(2, "np2", TR),
        driver_traceback(fit_frame(1061, "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)"),
                         "generate_sequences", [],
                         "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                         "OutOfMemoryError")[:-2] + [
            "Memory on the node (IP: 10.20.49.141, ID: 4748aa6d) where the task (actor ID: 9e43ace6, "
            "name=8szhVkWorkerDict_0:3:WorkerDict.actor_rollout_generate_sequences, pid=4100606, memory used=56.57GB) "
            "was running was 246.41GB / 251.54GB (0.979583), which exceeds the memory usage threshold of 0.95.",
            "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
    ), "host_oom_killed", 2, "gen", root="Task was killed due to the node running low on memory"))

    # --- stopped on purpose or by a scheduler ------------------------------------------------------------
    c.append(Case("ctrl_c_steps_flushed_after", join(
        startup(TRA, total=210), validation(0, "np2", TRA), bar(0, 210, "00:00", TRA, "?it/s"),
        [step_line(s, "np2", TRA) for s in range(1, 5)],
        [bar(s, 210, _clock(s * 400), TRA, "400.12s/it") for s in range(1, 7)],
        "^CTraceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 42, in main',
        "    run_ppo(config)",
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 871, in get_objects',
        "    ] = self.core_worker.get_objects(",
        '  File "python/ray/_raylet.pyx", line 3006, in ray._raylet.CoreWorker.get_objects',
        "KeyboardInterrupt",
        [step_line(s, "np2", TRA) for s in range(5, 7)],
    ), "interrupted", 6, None, stop_reason="keyboard", root="KeyboardInterrupt"))
    c.append(Case("slurm_cancelled_after_step", join(
        startup("", total=500), validation(0, "bare"), steps(1, 50, "bare", total=500),
        "slurmstepd: error: *** JOB 4410021 ON gpu-node-12 CANCELLED AT 2025-06-03T11:22:33 ***",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    ), "interrupted", 50, None, stop_reason="cancelled", root="CANCELLED AT"))
    c.append(Case("slurm_time_limit_ray_prefix", join(
        startup(TR, total=500), validation(0, "np2", TR), steps(1, 31, "np2", TR, total=500),
        "slurmstepd: error: *** JOB 4410022 ON gpu-node-12 CANCELLED AT 2025-06-03T11:22:33 DUE TO TIME LIMIT ***",
        "srun: error: gpu-node-12: task 0: Terminated",
        "srun: forcing job termination",
    ), "interrupted", 31, None, stop_reason="time_limit", root="DUE TO TIME LIMIT"))
    c.append(Case("sigterm_bash_job_report_after_steps", join(
        startup("", total=500), validation(0, "np2"), steps(1, 9, "np2"),
        "./train_grpo.sh: line 41: 61149 Terminated              python3 -m verl.trainer.main_ppo \"$@\"",
    ), "interrupted", 9, None, stop_reason="sigterm", root="Terminated"))

    # --- logs that just end -------------------------------------------------------------------------------
    c.append(Case("cut_mid_step_line", join(
        trained_to(11, "np2", TR),
        step_line(12, "np2", TR)[:180],
    ), "no_outcome", 12, None))
    c.append(Case("bar_only_cr_updates_one_line", join(
        startup(TR, total=15625),
        "\r".join(bar(s, 15625, _clock(s * 67), "", "67.01s/it") for s in range(0, 34)),
    ), "no_outcome", 33, None))
    # a fork's own tqdm bar, described by its epoch and step, after verl's bar: the run got to verl's count
    c.append(Case("bar_only_then_own_tqdm_bar_named_by_step", join(
        startup(TR, total=40), bar(0, 40, "00:00", TR, "?it/s"),
        [bar(s, 40, _clock(s * 70), TR, "70.02s/it") for s in range(1, 13)],
        f"{TR}epoch 0, step 30: 100%|██████████| 64/64 [00:05<00:00, 12.01it/s]",
    ), "no_outcome", 12, None))
    c.append(Case("snapshot_mid_rollout_vllm_warnings", join(
        trained_to(14, "bare", TR),
        f"{W}WARNING 06-01 10:31:02 [scheduler.py:1560] Sequence group 35 is preempted by PreemptionMode.RECOMPUTE "
        "mode because there is not enough KV cache space. This can affect the end-to-end performance.",
    ), "no_outcome", 14, "gen"))
    c.append(Case("snapshot_with_caught_worker_exception", join(
        trained_to(4, "np2", TR),
        f"{prefix('plain', 'AgentLoopWorker', 5001)}Traceback (most recent call last):",
        f'{prefix("plain", "AgentLoopWorker", 5001)}  File "/workspace/verl/verl/tools/sandbox_tool.py", line 88, '
        "in execute",
        f"{prefix('plain', 'AgentLoopWorker', 5001)}    result = json.loads(resp)",
        f"{prefix('plain', 'AgentLoopWorker', 5001)}json.decoder.JSONDecodeError: Expecting value: line 1 column 1 "
        "(char 0)",
        steps(5, 7, "np2", TR),
    ), "no_outcome", 7, None))

    # --- start-up and configuration errors -------------------------------------------------------------
    c.append(Case("hydra_override_error", join(
        "Could not override 'actor_rollout_ref.actor.ppo_micro_batch_size_per_device'.",
        "To append to your config use +actor_rollout_ref.actor.ppo_micro_batch_size_per_device=4",
        "Key 'ppo_micro_batch_size_per_device' is not in struct",
        "    full_key: actor_rollout_ref.actor.ppo_micro_batch_size_per_device",
        "    object_type=dict",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ), "python_exception", 0, "startup", root="Could not override"))
    c.append(Case("config_assertion_in_task_runner", join(
        startup(TR)[:8],
        "Error executing job with overrides: ['data.train_batch_size=100', 'actor_rollout_ref.rollout.n=8']",
        "Traceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(AssertionError): ray::TaskRunner.run() (pid=3165, ip=10.0.3.7, actor_id=5066, "
        "repr=<main_ppo.TaskRunner object at 0x7f450cc6c310>)",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 205, in run',
        "    validate_config(config=config, use_reference_policy=need_reference_policy(role_worker_mapping))",
        '  File "/workspace/verl/verl/utils/config.py", line 118, in validate_config',
        "    assert real_train_batch_size % minimal_bsz == 0, (",
        "AssertionError: real_train_batch_size (800) must be divisible by minimal possible batch size (16)",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ), "python_exception", 0, "startup", root="real_train_batch_size (800) must be divisible"))
    c.append(Case("import_error_no_prefix", join(
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 19, in <module>',
        "    from verl.trainer.ppo.ray_trainer import RayPPOTrainer",
        '  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 42, in <module>',
        "    from verl.utils.tracking import ValidationGenerationsLogger",
        "ModuleNotFoundError: No module named 'tensordict'",
    ), "python_exception", 0, "startup", root="No module named 'tensordict'"))
    c.append(Case("vllm_kv_cache_at_startup", join(
        startup(TR),
        f"{W}ERROR 06-01 10:03:44 [core.py:586] EngineCore failed to start.",
        init_failure(frame("/usr/local/lib/python3.10/dist-packages/vllm/v1/core/kv_cache_utils.py", 531,
                           "check_enough_kv_cache_memory", "raise ValueError("),
                     "ValueError: No available memory for the cache blocks. Try increasing "
                     "`gpu_memory_utilization` when initializing the engine.", "ValueError"),
    ), "vllm_engine_error", 0, "startup", root="No available memory for the cache blocks"))
    c.append(Case("sglang_mem_fraction_startup", join(
        startup(TR, engine="sglang"),
        f"{prefix('plain', 'SGLangHttpServer', 250977)}Traceback (most recent call last):",
        f'{prefix("plain", "SGLangHttpServer", 250977)}  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/'
        'managers/scheduler.py", line 2301, in run_scheduler_process',
        f"{prefix('plain', 'SGLangHttpServer', 250977)}RuntimeError: Not enough memory. Please try to increase "
        "--mem-fraction-static.",
        driver_traceback(frame("/workspace/verl/verl/trainer/main_ppo.py", 303, "run", "trainer.init_workers()"),
                         None, [], "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                         "RuntimeError"),
    ), "vllm_engine_error", 0, "startup", root="Not enough memory. Please try to increase --mem-fraction-static"))

    # --- errors in training: engine, reward, checkpoint, NaN --------------------------------------------
    c.append(Case("vllm_engine_dead_in_gen", join(
        trained_to(7, "np2", TR),
        f"{W}ERROR 06-01 11:02:13 [core.py:420] EngineCore encountered a fatal error.",
        gen_failure(frame("/usr/local/lib/python3.10/dist-packages/vllm/v1/engine/core_client.py", 721,
                          "get_output", "raise self._format_exception(outputs) from None"),
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
                         "trace (above) for the root cause.", "EngineDeadError"),
    ), "vllm_engine_error", 7, "gen", root="EngineCore encountered"))
    c.append(Case("reward_fn_zero_division", join(
        startup("", total=100), validation(0, "bare"), steps(1, 4, "bare"),
        "Error executing job with overrides: ['reward_model.reward_manager=naive']",
        "Traceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(ZeroDivisionError): ray::TaskRunner.run() (pid=3165, ip=10.0.3.7)",
        *fit_frame(1078, "reward_tensor, reward_extra_infos_dict = compute_reward(batch, self.reward_fn)"),
        *frame("/workspace/verl/verl/trainer/ppo/reward.py", 141, "compute_reward",
               "reward_result = reward_fn(data, return_dict=True)"),
        *frame("/workspace/verl/verl/workers/reward_manager/naive.py", 97, "__call__",
               "score = self.compute_score("),
        *frame("/workspace/my_rewards/math_reward.py", 33, "compute_score", "return correct / total"),
        "ZeroDivisionError: division by zero",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ), "python_exception", 4, "reward", root="ZeroDivisionError: division by zero"))
    c.append(Case("checkpoint_disk_full", join(
        trained_to(19, "np2", TR),
        f"{TR}local_global_step_folder: checkpoints/verl_examples/gsm8k/global_step_20",
        driver_traceback(fit_frame(1190, "self._save_checkpoint()")
                         + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 712, "_save_checkpoint",
                                 "self.actor_rollout_wg.save_checkpoint("),
                         "save_checkpoint",
                         frame(FSDP, 1001, "save_checkpoint", "self.checkpoint_manager.save_checkpoint(")
                         + frame("/workspace/verl/verl/utils/checkpoint/fsdp_checkpoint_manager.py", 241,
                                 "save_checkpoint", "torch.save(model_state_dict, model_path)"),
                         "OSError: [Errno 28] No space left on device", "OSError",
                         "WorkerDict.actor_rollout_save_checkpoint"),
    ), "python_exception", 19, "save_checkpoint", root="No space left on device"))
    c.append(Case("nan_then_vllm_sampling_error", join(
        trained_to(5, "np2", TR),
        step_line(6, "np2", TR, extra={"actor/pg_loss": float("nan"), "actor/grad_norm": float("nan")}),
        bar(6, 100, "09:12", TR),
        gen_failure([], "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
                         "RuntimeError"),
    ), "nan_divergence", 6, "gen", root="probability tensor contains either"))

    # --- stalls ---------------------------------------------------------------------------------------------
    retry = [logged(T0 + timedelta(minutes=2 + 4 * i), "WARNING",
                    f"Async request to resume_memory_occupation timed out (attempt {i + 1})", W) for i in range(12)]
    c.append(Case("stall_retry_loop_python_logging", join(
        startup(TR), validation(0, "np2", TR),
        steps(1, 30, "np2", TR), retry,
    ), "hang", 30, "gen"))
    c.append(Case("stall_then_nccl_watchdog", join(
        trained_to(40, "np2", TR),
        logged(T0, "DEBUG", "dp actor Before update_policy, memory allocated (GB): 40.12, memory reserved (GB): "
               "44.00, device memory used/total (GB): 52.31/79.11", W),
        logged(T0 + timedelta(minutes=10, seconds=1), "ERROR", "[Rank 3] Watchdog caught collective operation "
               "timeout: WorkNCCL(SeqNum=88, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran "
               "for 600021 milliseconds before timing out.", W),
    ), "nccl_timeout", 40, "update_actor", root="Watchdog caught collective operation timeout"))
    c.append(Case("bar_stuck_glog_no_steps", join(
        startup(TR, total=58), bar(0, 58, "00:00", "", "?it/s"),
        "I0718 19:14:23.112233 4001 pjrt_compile.cc:112] Compiling module jit_generate",
        bar(0, 58, "12:40", "", "?it/s"),
    ), "hang", 0, "gen", root="0/58 [12:40<?"))
    return c


def _more_cases() -> list[Case]:
    c: list[Case] = []
    sg = prefix("plain", "SGLangHttpServer", 250977)
    # validation is the `testing` phase, before training (the initial validation) or during it
    c.append(Case("oom_in_initial_validation", join(
        startup(TR), f"{TR}test_gen_batch meta info: {{'eos_token_id': 151643, 'validate': True}}",
        driver_traceback(fit_frame(1002, "val_metrics = self._validate()")
                         + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 640, "_validate",
                                 "test_output_gen_batch_padded = self.actor_rollout_wg.generate_sequences("),
                         "generate_sequences",
                         frame(FSDP, 811, "generate_sequences", "output = self.rollout.generate_sequences(prompts)"),
                         OOM, "OutOfMemoryError"),
    ), "cuda_oom", 0, "testing", root="CUDA out of memory"))
    c.append(Case("error_in_periodic_validation", join(
        trained_to(9, "np2", TR),
        f"{TR}test_gen_batch meta info: {{'eos_token_id': 151643, 'validate': True, 'global_steps': 10}}",
        driver_traceback(fit_frame(1175, "val_metrics: dict = self._validate()")
                         + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 701, "_validate",
                                 "reward_tensor = self.val_reward_fn(test_batch)"),
                         None, [], "KeyError: 'ground_truth'", "KeyError"),
    ), "python_exception", 9, "testing", root="KeyError: 'ground_truth'"))
    c.append(Case("oom_reward_model_v04", join(
        trained_to(2, "v04", TR),
        driver_traceback(fit_frame(1070, "reward_tensor = self.rm_wg.compute_rm_score(batch)"),
                         "compute_rm_score", frame(FSDP, 1610, "compute_rm_score", "rm_score = self._forward_micro_batch(micro_batch)"),
                         OOM, "OutOfMemoryError", "WorkerDict.rm_compute_rm_score"),
    ), "cuda_oom", 2, "reward", root="CUDA out of memory"))
    # old verl (v0.2: `main_task`, unhandled errors printed by the driver's Ray task)
    mt = prefix("plain", "main_task", 1748945)
    c.append(Case("unhandled_error_keyerror_old_main_task", join(
        startup(mt), val_line(0, "v04", mt), [step_line(s, "v04", mt) for s in range(1, 3)],
        f"{mt}Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict."
        "actor_rollout_compute_log_prob() (pid=1751030, ip=10.65.194.91, actor_id=d2209bc23ff048efb340dd9001000000, "
        "repr=<verl.single_controller.ray.base.WorkerDict object at 0x152530529600>)",
        f'{mt}  File "/root/verl/verl/single_controller/ray/base.py", line 399, in func',
        f"{mt}    return getattr(self.worker_dict[key], name)(*args, **kwargs)",
        f'{mt}  File "/root/verl/verl/workers/fsdp_workers.py", line 480, in compute_log_prob',
        f"{mt}    output = self.actor.compute_log_prob(data=data)",
        f"{mt}KeyError: 'responses'",
    ), "python_exception", 2, "old_log_prob", root="KeyError: 'responses'"))
    # a run resumed from a checkpoint: the first attempt's crash is not how the run ended
    c.append(Case("resumed_after_oom_then_snapshot", join(
        trained_to(10, "np2", TR),
        driver_traceback(fit_frame(1061, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                         "update_actor", frame(FSDP, 720, "update_actor", "metrics = self.actor.update_policy(data=data)"),
                         OOM, "OutOfMemoryError", "WorkerDict.actor_rollout_update_actor"),
        startup(prefix("plain", "TaskRunner", 9001))[:-1],
        f"{prefix('plain', 'TaskRunner', 9001)}Found checkpoint: %s /ckpt/verl_examples/gsm8k/global_step_10",
        f"{prefix('plain', 'TaskRunner', 9001)}Setting global step to 10",
        validation(10, "np2", prefix("plain", "TaskRunner", 9001)),
        steps(11, 14, "np2", prefix("plain", "TaskRunner", 9001)),
    ), "no_outcome", 14, None))
    # step lines that carry no timer (a recipe or a trimmed logger): still steps
    c.append(Case("step_lines_without_timers", join(
        startup(TR), val_line(0, "bare", TR),
        [f"{TR}step:{s} - actor/pg_loss:{-0.01 * s!r} - actor/entropy:0.5 - critic/score/mean:0.3 - "
         f"response_length/mean:300.5" for s in range(1, 8)],
    ), "no_outcome", 7, None))
    # the JSONL file logger as the run's only record
    c.append(Case("jsonl_file_logger_only", join(
        [f'{{"step": {s}, "data": {{"actor/pg_loss": -0.01, "critic/score/mean": 0.4, "timing_s/gen": 41.2, '
         f'"timing_s/step": 90.1, "training/global_step": {s}}}}}' for s in range(1, 13)],
    ), "no_outcome", 12, None))
    # step lines hard-wrapped at 120 columns (an issue paste)
    wrapped = []
    for s in range(1, 5):
        line = step_line(s, "bare")
        wrapped += [line[i:i + 120] for i in range(0, len(line), 120)]
    c.append(Case("hard_wrapped_step_lines", join(startup("")[:6], wrapped), "no_outcome", 4, None))
    # Ctrl-C before the first step: still starting up
    c.append(Case("ctrl_c_during_startup", join(
        startup(TR)[:12],
        f"{W}INFO 06-01 10:01:02 [model_runner.py:1115] Loading model weights took 14.2 GiB",
        CTRL_C,
    ), "interrupted", 0, "startup", stop_reason="keyboard", root="KeyboardInterrupt"))
    # other schedulers' time limits
    c.append(Case("pbs_walltime_exceeded", join(
        startup("", total=300), validation(0, "bare"), steps(1, 22, "bare", total=300),
        "=>> PBS: job killed: walltime 86415 exceeded limit 86400",
    ), "interrupted", 22, None, stop_reason="time_limit", root="walltime"))
    c.append(Case("lsf_run_limit", join(
        startup("", total=300), validation(0, "bare"), steps(1, 23, "bare", total=300),
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        "Exited with exit code 140.",
    ), "interrupted", 23, None, stop_reason="time_limit", root="TERM_RUNLIMIT"))
    # a worker segfault: the actor died, the signal is the only cause shown
    c.append(Case("worker_segfault_actor_died", join(
        trained_to(3, "np2", TR),
        f"{W}*** SIGSEGV received at time=1717236000 on cpu 3 ***",
        f"{W}PC: @     0x7f2a1c2b3c4d  (unknown)  c10::cuda::CUDACachingAllocator::raw_delete()",
        f"{W}Fatal Python error: Segmentation fault",
        actor_died(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)", "compute_log_prob",
                   "WorkerDict.actor_rollout_compute_log_prob"),
    ), "ray_actor_died", 3, "old_log_prob"))
    # NCCL failing outright (not a timeout): distributed communication failed
    c.append(Case("nccl_unhandled_system_error", join(
        trained_to(5, "np2", TR),
        driver_traceback(fit_frame(1143, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                         "update_actor", frame(FSDP, 720, "update_actor", "metrics = self.actor.update_policy(data=data)"),
                         "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
                         "NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
                         "version 2.20.5", "DistBackendError", "WorkerDict.actor_rollout_update_actor"),
    ), "nccl_timeout", 5, "update_actor", root="NCCL error"))
    # Ascend NPU and AMD device memory
    c.append(Case("npu_oom_update_actor", join(
        trained_to(4, "np2", TR),
        driver_traceback(fit_frame(1143, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                         "update_actor", frame(FSDP, 720, "update_actor", "metrics = self.actor.update_policy(data=data)"),
                         "RuntimeError: NPU out of memory. Tried to allocate 2.50 GiB (NPU 3; 60.96 GiB total "
                         "capacity; 55.12 GiB already allocated; 55.12 GiB current active; 1.02 GiB free)",
                         "RuntimeError", "WorkerDict.actor_rollout_update_actor"),
    ), "cuda_oom", 4, "update_actor", root="NPU out of memory"))
    c.append(Case("rocm_hip_oom_gen", join(
        trained_to(2, "np2", TR),
        gen_failure([], "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total "
                         "capacity of 191.98 GiB of which 1.02 GiB is free.", "OutOfMemoryError"),
    ), "cuda_oom", 2, "gen", root="HIP out of memory"))
    # DAPO's dynamic sampling keeps generating: a snapshot cut there is in generation
    c.append(Case("dapo_keep_generating_snapshot", join(
        trained_to(6, "np2", TR),
        f"{TR}num_prompt_in_batch=412 < prompt_bsz=512",
        f"{TR}num_gen_batches=2. Keep generating...",
    ), "no_outcome", 6, "gen"))
    # SGLang scheduler lines keep coming for 40 minutes after the last step, nothing advances
    c.append(Case("stall_sglang_decode_lines", join(
        startup(TR, engine="sglang"), validation(0, "np2", TR), steps(1, 12, "np2", TR),
        [f"{sg}[2025-06-01 {10 + i // 6:02d}:{(i % 6) * 10:02d}:05 TP0] Decode batch. #running-req: 1, #token: 4096, "
         "token usage: 0.01, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0" for i in range(5)],
    ), "hang", 12, "gen"))
    # every line stamped by the container runtime (kubectl logs --timestamps)
    k8s = [f"2025-06-01T10:{i // 60:02d}:{i % 60:02d}.123456789Z {ln}" for i, ln in enumerate([
        *startup(TR), *validation(0, "np2", TR), *steps(1, 3, "np2", TR),
        *driver_traceback(fit_frame(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)"),
                          "compute_log_prob",
                          frame(FSDP, 893, "compute_log_prob", "output = self.actor.compute_log_prob(data=data)"),
                          "KeyError: 'old_log_probs'", "KeyError", "WorkerDict.actor_rollout_compute_log_prob")])]
    c.append(Case("k8s_timestamped_keyerror", join(k8s), "python_exception", 3, "old_log_prob",
                  root="KeyError: 'old_log_probs'"))
    # a Ray job submitted with `ray job submit` that finished
    c.append(Case("ray_job_succeeded_no_total", join(
        "Job submission server address: http://127.0.0.1:8265",
        validation(0, "np2", TR), [step_line(s, "np2", TR) for s in range(1, 9)],
        "------------------------------------------",
        "Job 'raysubmit_8fk2LcXbq1' succeeded",
        "------------------------------------------",
    ), "completed", 8, None))
    # finished, then noise while shutting down
    c.append(Case("completed_then_atexit_noise", join(
        startup(TR, total=2), validation(0, "np2", TR), steps(1, 2, "np2", TR, total=2),
        f"{TR}(\"Final validation metrics: {{'val-core/openai/gsm8k/acc/mean@1': 0.61}}\")",
        "Exception ignored in atexit callback: <function shutdown at 0x7f2a1c2b3c40>",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/wandb/sdk/wandb_run.py", line 2466, in _atexit_cleanup',
        "BrokenPipeError: [Errno 32] Broken pipe",
    ), "completed", 2, None))
    # Ray's autoscaler waits for GPUs that never come: start-up stalls
    c.append(Case("stall_waiting_for_resources", join(
        startup(TR)[:12],
        [f"(autoscaler +{m}m{s}s) Warning: The following resource request cannot be scheduled right now: "
         "{'GPU': 1.0, 'CPU': 1.0}. This is likely due to all cluster resources being claimed by actors. Consider "
         "creating fewer actors or adding more nodes to this Ray cluster." for m, s in ((0, 41), (11, 2), (22, 5),
                                                                                      (33, 9), (44, 12), (55, 14))],
    ), "hang", 0, "startup"))
    return c


def _third_cases() -> list[Case]:
    c: list[Case] = []
    tr2 = prefix("plain", "TaskRunner", 7001)
    # one rank's own error, then its peers' collectives time out waiting for it: the first cause in time wins
    c.append(Case("rank_error_then_peer_watchdogs", join(
        trained_to(7, "np2", TR),
        logged(T0, "DEBUG", "dp actor Before update_policy, memory allocated (GB): 40.12, memory reserved (GB): "
               "44.00, device memory used/total (GB): 52.31/79.11", W),
        f"{W}Traceback (most recent call last):",
        f'{W}  File "{FSDP}", line 720, in update_actor',
        f"{W}    metrics = self.actor.update_policy(data=data)",
        f"{W}RuntimeError: The size of tensor a (4096) must match the size of tensor b (4095) at non-singleton "
        "dimension 1",
        f"{WIP}[rank5]:[E601 10:10:31.858931807 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=912, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600013 milliseconds before timing out.",
        driver_traceback(fit_frame(1143, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                         "update_actor", frame(FSDP, 720, "update_actor", "metrics = self.actor.update_policy(data=data)"),
                         "RuntimeError: The size of tensor a (4096) must match the size of tensor b (4095) at "
                         "non-singleton dimension 1", "RuntimeError", "WorkerDict.actor_rollout_update_actor"),
    ), "python_exception", 7, "update_actor", root="The size of tensor a (4096) must match"))
    # Python 3.11 exception groups from an agent loop's task group
    c.append(Case("exception_group_agent_loop", join(
        trained_to(3, "np2", TR),
        f"{TR}  + Exception Group Traceback (most recent call last):",
        f'{TR}  |   File "/workspace/verl/verl/experimental/agent_loop/agent_loop.py", line 498, in generate_sequences',
        f"{TR}  |     async with asyncio.TaskGroup() as tg:",
        f"{TR}  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        f"{TR}  +-+---------------- 1 ----------------",
        f"{TR}    | Traceback (most recent call last):",
        f'{TR}    |   File "/workspace/verl/verl/experimental/agent_loop/tool_agent_loop.py", line 144, in _call_tool',
        f"{TR}    |     tool = self.tools[tool_name]",
        f"{TR}    | KeyError: 'code_interpreter'",
        f"{TR}    +------------------------------------",
        driver_traceback(fit_frame(1061, "gen_batch_output = self.async_rollout_manager.generate_sequences(gen_batch)"),
                         None, [], "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
                         "ExceptionGroup"),
    ), "python_exception", 3, "gen", root="KeyError: 'code_interpreter'"))
    # Ctrl-C whose traceback shows where the trainer waited
    c.append(Case("ctrl_c_traceback_in_fit", join(
        trained_to(5, "np2", TR),
        prefixed(TR, "Traceback (most recent call last):",
                 fit_frame(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)"),
                 frame("/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", 871, "get_objects",
                       "] = self.core_worker.get_objects("),
                 "KeyboardInterrupt"),
    ), "interrupted", 5, "old_log_prob", stop_reason="keyboard", root="KeyboardInterrupt"))
    # a second run appended to the same file (`tee -a`), started from scratch without any start-up notice
    c.append(Case("restart_appended_without_markers", join(
        validation(0, "bare"), steps(1, 5, "bare"),
        "Traceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 96, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=3165, ip=10.0.3.7)",
        "ValueError: too many values to unpack (expected 2)",
        val_line(0, "bare"), steps(1, 3, "bare"),
    ), "no_outcome", 3, None))
    # the last thing printed is the actor update's memory debug line (VERL_LOGGING_LEVEL=DEBUG)
    c.append(Case("snapshot_in_update_actor_memory_debug", join(
        trained_to(9, "np2", TR),
        logged(T0, "DEBUG", "dp actor Before update_policy, memory allocated (GB): 40.12, memory reserved (GB): "
               "44.00, device memory used/total (GB): 52.31/79.11", W),
    ), "no_outcome", 9, "update_actor"))
    # an issue paste: only the error, no start-up, no step line
    c.append(Case("issue_paste_only_traceback", join(
        driver_traceback(fit_frame(1094, "ref_log_prob = self.ref_policy_wg.compute_ref_log_prob(batch)"),
                         "compute_ref_log_prob",
                         frame(FSDP, 1290, "compute_ref_log_prob", "output = self.ref_policy.compute_log_prob(data=data)"),
                         "RuntimeError: CUDA error: an illegal memory access was encountered", "RuntimeError",
                         "WorkerDict.ref_compute_ref_log_prob"),
    ), "python_exception", 0, "ref", root="an illegal memory access was encountered"))
    # a resumed run (its validation repeats the checkpoint's step) stopped by SLURM's time limit
    c.append(Case("resumed_then_time_limit", join(
        resumed_at(40, tr2), steps(41, 47, "np2", tr2, total=200),
        "slurmstepd: error: *** STEP 4410023.0 ON gpu-node-12 CANCELLED AT 2025-06-03T11:22:33 DUE TO TIME LIMIT ***",
    ), "interrupted", 47, None, stop_reason="time_limit", root="DUE TO TIME LIMIT"))
    # the rollout's vLLM engine dies of device memory inside its own process
    c.append(Case("vllm_cumem_allocator_oom", join(
        trained_to(11, "np2", TR),
        f"{W}cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
        gen_failure(frame(FSDP, 805, "generate_sequences", "self.rollout.wake_up()")
                         + frame("/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", 233,
                                 "wake_up", "create_and_map(handle)"),
                         "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
                         "RuntimeError"),
    ), "cuda_oom", 11, "gen", root="out of memory at /workspace/csrc/cumem_allocator.cpp"))
    return c


def wrap(lines: list[str], width: int) -> list[str]:
    """Lines hard-wrapped at a terminal's width, as a paste from a terminal keeps them."""
    return [ln[i:i + width] for ln in lines for i in range(0, max(len(ln), 1), width)]


def _fourth_cases() -> list[Case]:
    c: list[Case] = []
    tr2 = prefix("plain", "TaskRunner", 7001)
    # a terminal paste hard-wrapped at 100 columns: step lines, the traceback, everything
    c.append(Case("hard_wrapped_oom_in_update_actor", join(wrap(
        trained_to(6, "bare", TR)
        + driver_traceback(fit_frame(1143, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                           "update_actor", frame(FSDP, 720, "update_actor", "metrics = self.actor.update_policy(data=data)"),
                           OOM, "OutOfMemoryError", "WorkerDict.actor_rollout_update_actor"), 100)),
        "cuda_oom", 6, "update_actor", root="CUDA out of memory"))
    # finished: its last step line lost its head to the wrapping, the total is known, the final validation printed
    c.append(Case("hard_wrapped_completed_total_known", join(
        startup(TR, total=3), validation(0, "np2", TR), steps(1, 2, "np2", TR, total=3),
        [piece for piece in wrap([step_line(3, "np2", TR, timers={"testing": 20.1})], 140)[1:]
         if "global_step" not in piece][1:],
        f"{TR}Final validation metrics: None",
    ), "completed", 2, None))
    # the driver process itself crashed (bash reports the signal): no worker died, nothing names why
    c.append(Case("driver_segfault_bash_report", join(
        trained_to(5, "bare"),
        "./run_grpo.sh: line 27: 61149 Segmentation fault      (core dumped) python3 -m verl.trainer.main_ppo \"$@\"",
    ), "unknown", 5, None, root="Segmentation fault"))
    # older Ray names a dead actor RayActorError, and lists the OOM killer among the possible causes
    c.append(Case("old_ray_actor_error_wording", join(
        trained_to(3, "v04", prefix("plain", "main_task", 12)),
        driver_traceback(fit_frame(913, "actor_output = self.actor_rollout_wg.update_actor(batch)"),
                         "update_actor", [], "ray.exceptions.RayActorError: The actor died unexpectedly before "
                         "finishing this task.", "RayActorError", "WorkerDict.actor_rollout_update_actor")[:-3] + [
            "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
            "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
            "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
            "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
            "root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop "
            "--force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.",
            "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
    ), "ray_actor_died", 3, "update_actor", root="The actor died unexpectedly"))
    c.append(Case("worker_crashed_error_in_ref", join(
        trained_to(4, "np2", TR),
        driver_traceback(fit_frame(1094, "ref_log_prob = self.ref_policy_wg.compute_ref_log_prob(batch)"),
                         None, [], "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing "
                         "this task. Check python-core-worker-*.log files for more information.", "WorkerCrashedError"),
    ), "ray_actor_died", 4, "ref", root="The worker died unexpectedly"))
    # resumed at step 40 (the bar starts there) and crashed in the first step of the new attempt
    c.append(Case("resumed_then_crash_in_first_step", join(
        resumed_at(40, tr2),
        driver_traceback(fit_frame(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)"),
                         "compute_log_prob",
                         frame(FSDP, 893, "compute_log_prob", "output = self.actor.compute_log_prob(data=data)"),
                         "RuntimeError: CUDA error: device-side assert triggered", "RuntimeError",
                         "WorkerDict.actor_rollout_compute_log_prob"),
    ), "python_exception", 40, "old_log_prob", root="device-side assert triggered"))
    # the advantage is computed on the driver: no worker call, the estimator's own frames say where
    c.append(Case("advantage_estimator_error", join(
        trained_to(8, "np2", TR),
        driver_traceback(fit_frame(1112, "batch = compute_advantage(")
                         + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 239, "compute_advantage",
                                 "advantages, returns = core_algos.compute_grpo_outcome_advantage(")
                         + frame("/workspace/verl/verl/trainer/ppo/core_algos.py", 301,
                                 "compute_grpo_outcome_advantage", "raise ValueError(f\"no score in the prompt group {idx}\")"),
                         None, [], "ValueError: no score in the prompt group 17", "ValueError"),
    ), "python_exception", 8, "adv", root="no score in the prompt group"))
    # SLURM's cgroup killed the job for host memory
    c.append(Case("slurm_cgroup_oom_kill", join(
        trained_to(13, "bare"),
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4410024.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
        "srun: error: gpu-node-12: task 0: Out Of Memory",
    ), "host_oom_killed", 13, None, root="oom-kill"))
    # a Ray message over gRPC's size limit is a Python error, not device memory
    c.append(Case("grpc_resource_exhausted_is_not_oom", join(
        trained_to(2, "np2", TR),
        driver_traceback(fit_frame(1061, "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)"),
                         None, [], "grpc._channel._MultiThreadedRendezvous: <_MultiThreadedRendezvous of RPC that "
                         "terminated with: status = StatusCode.RESOURCE_EXHAUSTED details = \"Received message larger "
                         "than max (2147483647 vs. 2147483647)\">", "_MultiThreadedRendezvous"),
    ), "python_exception", 2, "gen", root="_MultiThreadedRendezvous"))
    # Search-R1 (early verl, `main_task`): its rollout loop calls a retrieval server that is not up
    mt = prefix("plain", "main_task", 162009)
    c.append(Case("searchr1_retriever_down_in_rollout", join(
        startup(mt, total=1005)[:-1], f"{mt}epoch 0, step 1", f"{mt}ACTIVE_TRAJ_NUM: [256]",
        "Traceback (most recent call last):",
        '  File "/root/Search-R1/verl/trainer/main_ppo.py", line 114, in main',
        "    ray.get(main_task.remote(config))",
        "ray.exceptions.RayTaskError(ConnectionError): ray::main_task() (pid=162009, ip=10.0.3.7)",
        *fit_frame(806, "final_gen_batch_output = generation_manager.run_llm_loop("),
        *frame("/root/Search-R1/search_r1/llm_agent/generation.py", 262, "run_llm_loop",
               "next_obs, dones, valid_action, is_search = self.execute_predictions("),
        *frame("/root/Search-R1/search_r1/llm_agent/generation.py", 402, "batch_search",
               "return requests.post(self.config.search_url, json=payload).json()"),
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries exceeded "
        "with url: /retrieve (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at "
        "0x7f1c2c3d4e50>: Failed to establish a new connection: [Errno 111] Connection refused'))",
    ), "python_exception", 0, "gen", root="Max retries exceeded"))
    # the job was terminated (a scheduler's or an operator's SIGTERM): every process reports the signal
    c.append(Case("sigterm_received_by_every_process", join(
        trained_to(16, "np2", TR),
        f"{W}*** SIGTERM received at time=1717236000 on cpu 3 ***",
        f"{W}PC: @     0x7f2a1c2b3c4d  (unknown)  pthread_cond_wait@@GLIBC_2.3.2",
        f"{TR}*** SIGTERM received at time=1717236000 on cpu 7 ***",
        f"{YELLOW}(raylet){RESET} A worker died or was killed while executing a task by an unexpected system error. "
        "To troubleshoot the problem, check the logs for the dead worker. Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: The leased worker has unrecoverable failure. Worker is requested to be destroyed when it is "
        "returned. RPC Error message: Socket closed; The process receives a SIGTERM.",
    ), "interrupted", 16, None, stop_reason="sigterm", root="SIGTERM received"))
    # SGLang's scheduler announces its exception before the traceback that says what it was
    sw = prefix("plain", "WorkerDict", 4001)
    c.append(Case("sglang_scheduler_oom_at_init", join(
        startup(TR, engine="sglang"),
        f"{sw}[2025-11-20 01:13:05 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'{sw}  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2301, in '
        "run_scheduler_process",
        f"{sw}    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
        f'{sw}  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 1401, '
        "in init_memory_pool",
        f"{sw}    self.req_to_token_pool = ReqToTokenPool(",
        f"{sw}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
        "79.11 GiB of which 1.21 GiB is free.",
        init_failure([], "RuntimeError: Initialization failed. Please see the error messages above.", "RuntimeError"),
    ), "cuda_oom", 0, "startup", root="CUDA out of memory"))
    # paused at a breakpoint in the trainer (older Ray's `ray debug`) after some steps
    c.append(Case("remote_pdb_breakpoint_after_steps", join(
        trained_to(3, "np2", TR),
        f"{TR}RemotePdb session open at 10.0.3.7:41235, use 'ray debug' to connect...",
    ), "hang", 3, "gen", root="RemotePdb session open"))
    # the raylet's summary when no worker was killed for memory: only crashes, a dead actor with no known cause
    c.append(Case("raylet_summary_without_oom_kills", join(
        trained_to(6, "np2", TR),
        f"{YELLOW}(raylet){RESET} [2025-06-01 11:57:19,206 E 393463 393463] (raylet) node_manager.cc:3277: 0 "
        "Workers (tasks / actors) killed due to memory pressure (OOM), 1 Workers crashed due to other reasons at "
        "node (ID: 4748aa6d, IP: 10.0.3.7) over the last time period.",
        actor_died(1094, "old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)", "compute_log_prob",
                   "WorkerDict.actor_rollout_compute_log_prob"),
    ), "ray_actor_died", 6, "old_log_prob", root="The actor died unexpectedly"))
    # Python ignored an exception in a finaliser (a DataLoader's worker iterator): the run went on
    c.append(Case("exception_ignored_in_finaliser", join(
        trained_to(7, "np2", TR),
        prefixed(TR, "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3b2c1d5e50>",
                 "Traceback (most recent call last):",
                 frame("/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", 1479, "__del__",
                       "self._shutdown_workers()"),
                 "AssertionError: can only test a child process"),
    ), "no_outcome", 7, None))
    # Search-R1's PPO: the critic's backward runs out of device memory in the first step
    mt = prefix("plain", "main_task", 162009)
    c.append(Case("searchr1_critic_backward_oom", join(
        startup(mt, total=1005), val_line(0, "v04", mt), f"{mt}epoch 0, step 1", f"{mt}ACTIVE_TRAJ_NUM: [512, 226]",
        "Traceback (most recent call last):",
        '  File "/root/Search-R1/verl/trainer/main_ppo.py", line 114, in main',
        "    ray.get(main_task.remote(config))",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::main_task() (pid=162009, ip=10.0.3.7)",
        *fit_frame(872, "critic_output = self.critic_wg.update_critic(batch)"),
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.critic_update_critic() (pid=163208, "
        "ip=10.0.3.7)",
        *frame(FSDP, 1077, "update_critic", "metrics = self.critic.update_critic(data=data)"),
        *frame("/root/Search-R1/verl/workers/critic/dp_critic.py", 225, "update_critic", "loss.backward()"),
        *frame("/usr/local/lib/python3.9/site-packages/torch/autograd/__init__.py", 266, "backward",
               "Variable._execution_engine.run_backward("),
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU 3 has a total capacity of "
        "79.15 GiB of which 2.01 GiB is free.",
    ), "cuda_oom", 0, "update_critic", root="CUDA out of memory. Tried to allocate 4.64 GiB"))
    # a worker cannot import what the driver pickled: Ray wraps the import error in a system error
    c.append(Case("ray_system_error_no_module", join(
        startup(TR),
        driver_traceback(frame("/workspace/verl/verl/trainer/main_ppo.py", 303, "run", "trainer.init_workers()"),
                         None, [], "ray.exceptions.RaySystemError: System error: No module named 'my_reward'",
                         "RaySystemError"),
    ), "python_exception", 0, "startup", root="No module named 'my_reward'"))
    # Ctrl-C while a mid-run validation generates, and while a checkpoint is written
    c.append(Case("ctrl_c_during_periodic_validation", join(
        trained_to(10, "np2", TR),
        f"{TR}test_gen_batch meta info: {{'eos_token_id': 151643, 'validate': True, 'global_steps': 11}}",
        CTRL_C,
    ), "interrupted", 10, "testing", stop_reason="keyboard", root="KeyboardInterrupt"))
    c.append(Case("ctrl_c_during_checkpoint_save", join(
        trained_to(19, "np2", TR),
        f"{TR}local_global_step_folder: checkpoints/verl_examples/gsm8k/global_step_20",
        logged(T0, "INFO", "[Rank 0] Saved model to /ckpt/verl_examples/gsm8k/global_step_20/actor/"
               "model_world_size_8_rank_0.pt", W),
        CTRL_C,
    ), "interrupted", 19, "save_checkpoint", stop_reason="keyboard", root="KeyboardInterrupt"))
    return c


def _fifth_cases() -> list[Case]:
    """What the first diagnoses missed on logs kept aside: a NaN a person then stopped, stall notices that
    repeat until the log ends, a rollout still going after a resume, the phase of a config error while the reference policy is
    built, a resumed run dying in its first new step."""
    c: list[Case] = []
    ag = prefix("plain", "AgentLoopWorker", 5001)
    nan = {"actor/pg_loss": float("nan"), "actor/grad_norm": float("nan")}
    # the losses went NaN at step 6, then the user pressed Ctrl-C: the first cause in time wins (DESIGN.md)
    c.append(Case("nan_then_ctrl_c", join(
        trained_to(5, "np2", TR), step_line(6, "np2", TR, extra=dict(nan)), bar(6, 100, "09:12", TR), CTRL_C,
    ), "nan_divergence", 6, None, stop_reason="keyboard", root="actor/pg_loss:np.float64(nan)"))
    # vLLM's shm_broadcast warning, once a minute for 8 minutes after step 12, in a run whose steps take
    # ~7 minutes (so 8 minutes of clocks alone are within two steps): each warning is a minute of no progress
    c.append(Case("stall_vllm_shm_broadcast_warnings", join(
        startup(TR), validation(0, "np2", TR), steps(1, 12, "np2", TR, timers={"step": 420.0, "gen": 300.0}),
        [f"{W}INFO 06-01 11:{i:02d}:07 [shm_broadcast.py:501] No available shared memory broadcast block found in "
         "60 seconds. This typically happens when some processes are hanging or doing some time-consuming work "
         "(e.g. compilation, weight/kv cache quantization)." for i in range(1, 9)],
    ), "hang", 12, "gen", root="No available shared memory broadcast block found"))
    # Ray's autoscaler cannot place the workers for 9 minutes of start-up, until the log ends (its uptime clock)
    c.append(Case("stall_unschedulable_through_startup", join(
        startup(TR)[:12],
        [f"(autoscaler +{m}m{s}s) Warning: The following resource request cannot be scheduled right now: "
         "{'GPU': 1.0, 'CPU': 1.0}. This is likely due to all cluster resources being claimed by actors. Consider "
         "creating fewer actors or adding more nodes to this Ray cluster." for m, s in ((0, 41), (1, 50), (3, 2),
                                                                                      (5, 9), (7, 12), (9, 14))],
    ), "hang", 0, "startup", root="cannot be scheduled right now"))
    # a retriever refusing connections, retried every 10 s for 40 tries until the log ends (no clock on the lines)
    c.append(Case("stall_retriever_refused_until_the_end", join(
        trained_to(8, "np2", TR),
        [f"{TR}[Retriever] request failed: HTTPConnectionPool(host='127.0.0.1', port=8000): Max retries exceeded "
         "with url: /retrieve (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at "
         "0x7f3b2c1d9e50>: Failed to establish a new connection: [Errno 111] Connection refused')). Retrying in 10.0s..."
         for _ in range(40)],
    ), "hang", 8, "gen", root="[Retriever] request failed"))
    # a reward server answering an error, retried every 15 s until the log ends: the reward phase
    rw = prefix("plain", "RewardLoopWorker", 6001)
    c.append(Case("stall_reward_server_503_until_the_end", join(
        trained_to(8, "np2", TR),
        [f"{rw}reward server http://10.0.3.9:8000/score returned HTTP 503 Service Unavailable; retrying in 15s"
         for _ in range(25)],
    ), "hang", 8, "reward", root="returned HTTP 503"))
    # resumed from step 40, the first new step's rollout under way: agent-loop workers log new samples for six
    # minutes; with no step time to compare with, that is work, not a stall
    t = datetime(2025, 6, 1, 10, 0, 0)
    c.append(Case("resumed_rollout_in_progress_not_a_hang", join(
        resumed_at(40, TR),
        [logged(t + timedelta(seconds=20 * i), "INFO", f"[agent_loop] sample {i} finished: {2 + i % 3} turns, "
                f"{700 + 13 * i} response tokens", ag) for i in range(19)],
    ), "no_outcome", 40, "gen"))
    # resumed from step 40 without a validation line or a bar, and dead in its first new step: the last step done
    # is the checkpoint's
    c.append(Case("resumed_crash_in_first_new_step", join(
        startup(TR, total=200)[:-1],
        f"{TR}Load from checkpoint folder: /ckpt/verl_examples/gsm8k/global_step_40",
        f"{TR}Setting global step to 40",
        gen_failure([], OOM, "OutOfMemoryError"),
    ), "cuda_oom", 40, "gen", root="CUDA out of memory"))
    # a config error while the reference policy is built: its checks are named `_validate_config` and its message
    # says "validation", but the innermost verl frame is the reference worker's init: start-up
    c.append(Case("config_error_building_reference_policy", join(
        startup(TR)[:-2],
        driver_traceback(
            frame("/workspace/verl/verl/trainer/main_ppo.py", 303, "run", "trainer.init_workers()")
            + frame("/workspace/verl/verl/trainer/ppo/ray_trainer.py", 858, "init_workers",
                    "self.ref_policy_wg.init_model()"),
            "init_model",
            frame(FSDP, 640, "init_model", "self.ref_module_fsdp = self._build_model_optimizer(")
            + frame(FSDP, 231, "_build_model_optimizer", "fsdp_config = omega_conf_to_dataclass(fsdp_config)")
            + frame("/workspace/verl/verl/utils/config.py", 61, "omega_conf_to_dataclass", "cfg._validate_config()")
            + frame("/workspace/verl/verl/workers/config/engine.py", 88, "_validate_config",
                    "raise ValueError(f\"1 validation error for FSDPEngineConfig: {msg}\")"),
            "ValueError: 1 validation error for FSDPEngineConfig: param_offload must be a bool, got 'yes'",
            "ValueError", "WorkerDict.ref_init_model"),
    ), "python_exception", 0, "startup", root="1 validation error for FSDPEngineConfig"))
    return c


def _pasted_without_escapes(cases: list[Case]) -> list[Case]:
    """Cases coloured as Ray prints to a terminal, then pasted from a web page that dropped the ESC byte of
    each colour code: `[36m(TaskRunner pid=3165)[0m step:...`."""
    coloured = re.compile(r"^(?:\x1b)?(?:\[\d+m)?(\([^()]*pid=\d+[^()]*\))(?:\x1b)?(?:\[0m)? ?", re.M)
    return [Case(f"{c.name}_esc_lost", coloured.sub(r"[36m\1[0m ", c.text).replace(ESC, ""), c.failure_class,
                 c.last_step, c.phase, c.stop_reason, c.root) for c in cases]


def _container_stamped(cases: list[Case]) -> list[Case]:
    """Cases as `kubectl logs --timestamps` prints them: the container runtime's RFC 3339 stamp, in nanoseconds,
    before every line, one second apart (so only cases whose outcome does not hang on the time between lines)."""
    def stamped(text: str) -> str:
        return "".join(f"{T0 + timedelta(seconds=i):%Y-%m-%dT%H:%M:%S}.{i % 1000:03d}456789Z {line}\n"
                       for i, line in enumerate(text.split("\n")[:-1]))
    return [Case(f"{c.name}_k8s", stamped(c.text), c.failure_class, c.last_step, c.phase, c.stop_reason, c.root)
            for c in cases]


# the stamp hides what each line starts with: Ctrl-C's KeyboardInterrupt, the JSONL logger's rows, the Ray
# prefix that names a reward or agent-loop worker
CONTAINER_STAMPED = (
    "completed_v04_main_task_no_bar", "jsonl_file_logger_only", "ctrl_c_steps_flushed_after", "ctrl_c_during_startup",
    "ctrl_c_traceback_in_fit", "ctrl_c_during_periodic_validation", "ctrl_c_during_checkpoint_save", "nan_then_ctrl_c",
    "stall_reward_server_503_until_the_end", "resumed_rollout_in_progress_not_a_hang",
)
_BASE = _first_cases() + _more_cases() + _third_cases() + _fourth_cases() + _fifth_cases()
CASES = (_BASE + _pasted_without_escapes([c for c in _BASE if "pid=" in c.text])
         + _container_stamped([c for c in _BASE if c.name in CONTAINER_STAMPED]))
