"""How each failure class ends a run: the verbatim texts of the reference, with randomised ids and sizes."""

from __future__ import annotations

from dataclasses import dataclass

from .chatter import write_worker_warning
from .console import Console, c10d_ts, hex_id, log_ts, vllm_ts
from .tracebacks import (
    BACKWARD_TAIL,
    FORWARD_TAIL,
    SAMPLER_TAIL,
    SITE,
    VERL,
    driver_frames,
    frame,
    hydra_close,
    hydra_open,
    worker_frames,
)


@dataclass(frozen=True)
class Failure:
    """Where the cause of a run's end is: the line number in the driver log and a substring of that line.

    A hang also says in words what shows the stall (`hang_reason`).
    """

    root_line_no: int | None
    contains: str | None
    signature: str | None
    hang_reason: str | None = None


def _uuid(con: Console) -> str:
    h = hex_id(con.rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def random_rank(con: Console) -> int:
    """A rank of the run, drawn at random."""
    return int(con.rng.integers(con.spec.world_size))


def mark(con: Console, line: str, contains: str, signature: str | None = None) -> Failure:
    """Print the driver's line that holds the cause; return it as the run's failure."""
    no = con.line_no
    con.bare(line)
    return Failure(no, contains, signature or contains)


def raylet_died(con: Console, detail: str) -> None:
    """The raylet's notice that a worker died, with Ray's exit detail."""
    rng = con.rng
    con.raylet("A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
               f"problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff{hex_id(rng, 24)}01000000 "
               f"Worker ID: {hex_id(rng, 56)} Node ID: {hex_id(rng, 56)} Worker IP address: {con.spec.ip} "
               f"Worker port: {int(rng.integers(10000, 60000))} Worker PID: {con.worker_pids[0]} "
               f"Worker exit type: SYSTEM_ERROR Worker exit detail: {detail}")


def actor_died_lines(con: Console, detail: str) -> list[str]:
    """The `ActorDiedError` block the driver prints after a worker died."""
    rng = con.rng
    return [
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict",
        f"\tactor_id: {hex_id(rng, 24)}01000000",
        f"\tpid: {con.worker_pids[0]}",
        f"\tname: {''.join(rng.choice(list('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'), 6))}"
        "WorkerDict_0:0",
        f"\tnamespace: {_uuid(con)}",
        f"\tip: {con.spec.ip}",
        f"The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        f"{detail}",
    ]


CONNECTION_DETAIL = ("Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
                     "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray stop "
                     "--force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected "
                     "error.")


def cuda_oom(con: Console, phase: str) -> Failure:
    """torch.OutOfMemoryError raised in a worker, surfacing through two RayTaskError wrappers."""
    rng, spec = con.rng, con.spec
    total = spec.gpu_total_gb
    ask = rng.uniform(0.5, 14.0)
    free = rng.uniform(0.05, min(ask, 9.0) * 0.9)
    used = total - free
    alloc = used * rng.uniform(0.75, 0.9)
    exc = "OutOfMemoryError"
    gpu = int(rng.integers(spec.n_gpus_per_node))
    head = "torch.cuda.OutOfMemoryError" if spec.fmt == "v04" else "torch.OutOfMemoryError"
    if rng.random() < 0.5:
        who = f"Process {int(rng.integers(1000, 900000))} has {used:.2f} GiB memory in use."
    else:
        who = f"Including non-PyTorch memory, this process has {used:.2f} GiB memory in use."
    text = (f"{head}: CUDA out of memory. Tried to allocate {ask:.2f} GiB. GPU {gpu} has a total capacity of "
            f"{total:.2f} GiB of which {free:.2f} GiB is free. {who} Of the allocated memory {alloc:.2f} GiB is "
            f"allocated by PyTorch, and {used - alloc - 0.3:.2f} GiB is reserved by PyTorch but unallocated. If reserved "
            "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    tail = BACKWARD_TAIL if phase.startswith("update") else FORWARD_TAIL
    hydra_open(con)
    con.bare(*driver_frames(con, exc, phase), *worker_frames(con, exc, phase), *tail)
    fail = mark(con, text, "CUDA out of memory")
    hydra_close(con)
    return fail


def nccl_timeout(con: Console, phase: str) -> Failure:
    """The NCCL watchdog kills a rank after 600 s; the driver then sees the actor die."""
    rng = con.rng
    con.clock += 600.0
    rank = random_rank(con)
    seq = int(rng.integers(100, 90000))
    op = str(rng.choice(["ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE", "ALLTOALL", "GATHER"]))
    numel = int(rng.integers(1, 60_000_000))
    ran = 600000 + int(rng.integers(1, 90))
    stamp = c10d_ts(con.clock, int(rng.integers(0, 10**9)))
    pg = f"[PG ID {int(rng.integers(0, 4))} PG GUID {int(rng.integers(0, 12))} Rank {rank}]"
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000)"
    watchdog = f"Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out."
    first = f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:616] [Rank {rank}] {watchdog}"
    no = con.line_no
    con.worker(first, rank=rank)
    for text in (
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:1785] {pg} Exception (either an error or timeout) detected by "
        f"watchdog at work: {seq}, last enqueued NCCL work: {seq + 3}, last completed NCCL work: {seq - 1}.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. "
        "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
        "data.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the "
        "entire process down.",
        f"[{log_ts(con.clock)} E {con.worker_pids[rank]} {con.worker_pids[rank] + 611}] logging.cc:113: Unhandled "
        f"exception: N3c1016DistBackendErrorE. what(): {pg} Process group watchdog thread terminated with exception: "
        f"[Rank {rank}] {watchdog}",
    ):
        con.worker(text, rank=rank)
    raylet_died(con, CONNECTION_DETAIL)
    hydra_open(con)
    con.bare(*driver_frames(con, "ActorDiedError", phase), *actor_died_lines(con, CONNECTION_DETAIL))
    hydra_close(con)
    return Failure(no, "Watchdog caught collective operation timeout", "Watchdog caught collective operation timeout")


def ray_actor_died(con: Console, phase: str) -> Failure:
    """A worker process dies (SIGSEGV or lost connection): raylet notice, then ActorDiedError."""
    rng = con.rng
    fail = None
    if rng.random() < 0.5:
        rank = random_rank(con)
        t = int(con.clock)
        no = con.line_no
        con.worker(f"*** SIGSEGV received at time={t} on cpu {int(rng.integers(0, 128))} ***", rank=rank)
        con.worker(f"PC: @     0x7f{hex_id(rng, 10)}  (unknown)  c10::cuda::CUDACachingAllocator::Native::"
                   "DeviceCachingAllocator::malloc()", rank=rank)
        con.worker(f"[{log_ts(con.clock)} E {con.worker_pids[rank]} {con.worker_pids[rank]}] logging.cc:440: *** "
                   f"SIGSEGV received at time={t} on cpu 3 ***", rank=rank)
        fail = Failure(no, "SIGSEGV received", "The actor died unexpectedly before finishing this task.")
    raylet_died(con, CONNECTION_DETAIL)
    hydra_open(con)
    lines = [*driver_frames(con, "ActorDiedError", phase), *actor_died_lines(con, CONNECTION_DETAIL)]
    # without a signal, the driver's ActorDiedError is the first line that says what happened (raylet's
    # notice before it only says some worker died)
    died = "The actor died unexpectedly before finishing this task."
    at = con.line_no + next(i for i, line in enumerate(lines) if died in line and "ActorDiedError" in line)
    con.bare(*lines)
    hydra_close(con)
    return fail or Failure(at, died, died)


def host_oom_killed(con: Console, phase: str) -> Failure:
    """Ray's memory monitor kills a worker when the node runs out of host RAM."""
    rng, spec = con.rng, con.spec
    node = hex_id(rng, 56)
    killed = int(rng.integers(1, 4))
    no = con.line_no
    con.raylet(f"[{log_ts(con.clock)} E {con.runner_pid - 900} {con.runner_pid - 900}] (raylet) node_manager.cc:3277: "
               f"{killed} Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
               f"reasons at node (ID: {node}, IP: {spec.ip}) over the last time period. To see more information about "
               f"the Workers killed on this node, use `ray logs raylet.out -ip {spec.ip}`")
    total = float(rng.choice([251.54, 503.7, 1007.5, 2015.6]))
    frac = rng.uniform(0.951, 0.99)
    pid = con.worker_pids[0]
    worker_hex = hex_id(rng, 56)
    hydra_open(con)
    con.bare(*driver_frames(con, "OutOfMemoryError", phase))
    method = {"gen": "actor_rollout_generate_sequences", "old_log_prob": "actor_rollout_compute_log_prob",
              "save_checkpoint": "actor_rollout_save_checkpoint"}.get(phase, "actor_rollout_generate_sequences")
    mem = total * frac / spec.n_gpus_per_node * 1.6
    con.bare(
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        f"Memory on the node (IP: {spec.ip}, ID: {node}) where the task (actor ID: {hex_id(rng, 24)}01000000, "
        f"name={hex_id(rng, 6)}WorkerDict_0:0:WorkerDict.{method}, pid={pid}, memory used={mem:.2f}GB) was running "
        f"was {total * frac:.2f}GB / {total:.2f}GB ({frac:.6f}), which exceeds the memory usage threshold of 0.95. Ray "
        f"killed this worker (ID: {worker_hex}) because it was the most recently scheduled task; to see more "
        f"information about memory usage on this node, use `ray logs raylet.out -ip {spec.ip}`. To see the logs of "
        f"the worker, use `ray logs worker-{worker_hex}*out -ip {spec.ip}. Top 10 memory users:",
        "PID\tMEM(GB)\tCOMMAND",
        f"{pid}\t{mem:.2f}\tray::WorkerDict.{method}",
        f"{con.worker_pids[1 % len(con.worker_pids)]}\t{mem * 0.9:.2f}\tray::WorkerDict",
        f"{con.runner_pid}\t{rng.uniform(3, 12):.2f}\tray::TaskRunner.run",
        "Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more "
        "memory on this node or reducing task parallelism by requesting more CPUs per task. To adjust the kill "
        "threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray. To disable worker "
        "killing, set the environment variable `RAY_memory_monitor_refresh_ms` to zero.",
    )
    hydra_close(con)
    return Failure(no, "killed due to memory pressure (OOM)", "Task was killed due to the node running low on memory.")


def nan_divergence(con: Console, phase: str) -> Failure:
    """NaN logits reach the sampler: vLLM's multinomial rejects the probability tensor."""
    exc = "RuntimeError"
    hydra_open(con)
    con.bare(*driver_frames(con, exc, phase), *worker_frames(con, exc, phase), *SAMPLER_TAIL)
    fail = mark(con, "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
                 "probability tensor contains either `inf`, `nan` or element < 0")
    hydra_close(con)
    return fail


def python_exception(con: Console, phase: str) -> Failure:
    """A plain Python error in the reward function, the validation reward, or the set-up code."""
    rng, spec = con.rng, con.spec
    if phase == "startup":
        path = "./reward_fns/" + spec.dataset + "_reward.py"
        hydra_open(con)
        con.bare("Traceback (most recent call last):",
                 *frame(f"{VERL}/trainer/main_ppo.py", 42, "main", "run_ppo(config)"),
                 *frame(f"{VERL}/trainer/main_ppo.py", 96, "run_ppo", "ray.get(runner.run.remote(config))"),
                 *frame(f"{SITE}/ray/_private/worker.py", 930, "get_objects", "raise value.as_instanceof_cause()"))
        con.bare("ray.exceptions.RayTaskError(FileNotFoundError): ray::TaskRunner.run() "
                 f"(pid={con.runner_pid}, ip={spec.ip}, actor_id={hex_id(rng, 24)}01000000, "
                 f"repr=<main_ppo.TaskRunner object at 0x7f{hex_id(rng, 10)}>)",
                 *frame(f"{VERL}/trainer/main_ppo.py", 268, "run",
                        "reward_fn = load_reward_manager(config, tokenizer, num_examine=0)"),
                 *frame(f"{VERL}/trainer/ppo/reward.py", 112, "load_reward_manager",
                        "compute_score = get_custom_reward_fn(config)"),
                 *frame(f"{VERL}/trainer/ppo/reward.py", 68, "get_custom_reward_fn",
                        'raise FileNotFoundError(f"Reward function file \'{file_path}\' not found.")'))
        text = f"FileNotFoundError: Reward function file '{path}' not found."
        fail = mark(con, text, text)
        hydra_close(con)
        return fail
    chained = rng.random() < 0.5
    if phase == "testing":
        first = "ZeroDivisionError: division by zero"
        lines = driver_frames(con, "ValueError" if chained else "ZeroDivisionError", "reward")[:-2]
        lines += frame(f"{VERL}/trainer/ppo/ray_trainer.py", 1003, "fit", "val_metrics: dict = self._validate()")
        lines += frame(f"{VERL}/trainer/ppo/ray_trainer.py", 651, "_validate",
                       "result = self.val_reward_fn(test_batch, return_dict=True)")
        source = "return correct / total"
    else:
        first = f"NotImplementedError: Reward function is not implemented for data_source='{spec.data_source}_v2'"
        lines = driver_frames(con, "ValueError" if chained else "NotImplementedError", "reward")
        lines += frame(f"{VERL}/trainer/ppo/reward.py", 160, "compute_reward",
                       "reward_result = reward_fn(data, return_dict=True)")
        source = 'raise NotImplementedError(f"Reward function is not implemented for {data_source=}")'
    lines += frame(f"{VERL}/workers/reward_manager/naive.py", 88, "__call__", "score = self.compute_score(")
    lines += frame(f"{VERL}/utils/reward_score/__init__.py", 120, "default_compute_score", source)
    hydra_open(con)
    con.bare(*lines)
    fail = mark(con, first, first)
    if chained:
        con.bare("", "During handling of the above exception, another exception occurred:", "",
                 "Traceback (most recent call last):",
                 *frame(f"{VERL}/workers/reward_manager/naive.py", 96, "__call__",
                        'raise ValueError(f"reward computation failed for sample {i}") from None'),
                 "ValueError: reward computation failed for sample 0")
    hydra_close(con)
    return fail


def vllm_engine_error(con: Console, phase: str) -> Failure:
    """The rollout engine fails: no room for the KV cache at start, or a dead EngineCore mid-run."""
    rng, spec = con.rng, con.spec
    if phase == "startup":
        if spec.rollout == "sglang":
            text = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
            contains, exc = "Not enough memory. Please try to increase --mem-fraction-static", "RuntimeError"
        elif rng.random() < 0.5:
            text = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                    "initializing the engine.")
            contains, exc = "No available memory for the cache blocks", "ValueError"
        else:
            want = spec.max_prompt_length + spec.max_response_length
            text = (f"ValueError: The model's max seq len ({want}) is larger than the maximum number of tokens that can "
                    f"be stored in KV cache ({int(want * rng.uniform(0.5, 0.95))}). Try increasing "
                    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
            contains, exc = "is larger than the maximum number of tokens that can be stored in KV cache", "ValueError"
        hydra_open(con)
        con.bare(*driver_frames(con, exc, phase), *worker_frames(con, exc, phase))
        fail = mark(con, text, contains)
        hydra_close(con)
        return fail
    rank = random_rank(con)
    stamp = vllm_ts(con.clock)
    if spec.rollout == "sglang":
        tag = f"[{log_ts(con.clock)[:19]} TP{rank % spec.tp}]"
        con.worker(f"{tag} Scheduler hit an exception: Traceback (most recent call last):", rank=rank)
        con.worker(f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 2312, in run_scheduler_process', rank=rank)
        no = con.line_no
        con.worker("RuntimeError: CUDA error: an illegal memory access was encountered", rank=rank)
        exc, final = "RuntimeError", "RuntimeError: CUDA error: an illegal memory access was encountered"
    else:
        con.worker(f"ERROR {stamp} [core.py:586] EngineCore encountered a fatal error.", rank=rank)
        con.worker(f"ERROR {stamp} [core.py:586] Traceback (most recent call last):", rank=rank)
        con.worker(f'ERROR {stamp} [core.py:586]   File "{SITE}/vllm/v1/engine/core.py", line 577, in run_engine_core',
                   rank=rank)
        no = con.line_no
        con.worker(f"ERROR {stamp} [core.py:586] RuntimeError: CUDA error: an illegal memory access was encountered",
                   rank=rank)
        exc = "EngineDeadError"
        final = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
                 "for the root cause.")
    hydra_open(con)
    con.bare(*driver_frames(con, exc, phase), *worker_frames(con, exc, phase, rank), final)
    hydra_close(con)
    return Failure(no, "CUDA error: an illegal memory access was encountered",
                   "EngineDeadError" if spec.rollout == "vllm" else "illegal memory access")


def unknown(con: Console, phase: str) -> Failure:
    """The driver process dies natively (a C++ abort, a segfault in the Ray client): no Python error says why."""
    rng = con.rng
    con.clock += rng.uniform(5, 60)
    no = con.line_no
    if rng.random() < 0.5:
        signal = "Aborted"
        con.bare("terminate called after throwing an instance of 'std::system_error'",
                 "  what():  Resource temporarily unavailable")
        contains = "terminate called after throwing an instance of 'std::system_error'"
    else:
        signal = "Segmentation fault"
        contains = "Fatal Python error: Segmentation fault"
    con.bare(f"Fatal Python error: {signal}", "", *_thread_dump(con), "")
    con.bare(f"./run_{con.spec.algo}.sh: line 27: {con.driver_pid} {signal + ' ':<24}(core dumped) python3 -m "
             'verl.trainer.main_ppo "$@"')
    return Failure(no, contains, f"Fatal Python error: {signal}")


def _thread_dump(con: Console) -> list[str]:
    """faulthandler's dump of the driver's threads: tqdm's monitor and the main thread waiting in ray.get."""
    rng = con.rng
    lines = [f"Thread 0x00007f{hex_id(rng, 10)} (most recent call first):"]
    lines += [f'  File "/usr/lib/python3.10/threading.py", line {n} in {f}' for n, f in ((324, "wait"), (607, "wait"))]
    lines += [f'  File "{SITE}/tqdm/_monitor.py", line 60 in run',
              '  File "/usr/lib/python3.10/threading.py", line 1016 in _bootstrap_inner',
              '  File "/usr/lib/python3.10/threading.py", line 973 in _bootstrap', "",
              f"Current thread 0x00007f{hex_id(rng, 10)} (most recent call first):"]
    for path, line, func in ((f"{SITE}/ray/_private/worker.py", 930, "get_objects"),
                             (f"{SITE}/ray/_private/worker.py", 2822, "get"),
                             (f"{SITE}/ray/_private/client_mode_hook.py", 103, "wrapper"),
                             (f"{SITE}/ray/_private/auto_init_hook.py", 21, "auto_init_wrapper"),
                             (f"{VERL}/trainer/main_ppo.py", 96, "run_ppo"),
                             (f"{VERL}/trainer/main_ppo.py", 42, "main"),
                             (f"{SITE}/hydra/core/utils.py", 186, "run_job"),
                             (f"{SITE}/hydra/_internal/hydra.py", 119, "run"),
                             (f"{VERL}/trainer/main_ppo.py", 175, "<module>"),
                             ("/usr/lib/python3.10/runpy.py", 86, "_run_code"),
                             ("/usr/lib/python3.10/runpy.py", 196, "_run_module_as_main")):
        lines.append(f'  File "{path}", line {line} in {func}')
    lines += ["", "Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, numpy.linalg._umath_linalg, "
              "yaml._yaml, psutil._psutil_linux, ray._raylet, torch._C, torch._C._fft, torch._C._linalg, torch._C._nn, "
              "pyarrow.lib, pandas._libs.lib (total: 112)"]
    return lines


def completed_exit(con: Console) -> None:
    """A finished run sometimes ends with Ray's benign notice about workers receiving SIGTERM at shutdown."""
    if con.rng.random() < 0.3:
        raylet_died(con, "Worker exits unexpectedly by a signal. SystemExit is raised (sys.exit is called). "
                         "Exit code: 1. The process receives a SIGTERM.")


def segment_end(con: Console, kind: str, phase: str) -> None:
    """End of a non-final segment: a killed job, or an error that a later resume recovers from."""
    if kind == "nccl_timeout":
        nccl_timeout(con, phase)
    elif kind == "ray_actor_died":
        ray_actor_died(con, phase)
    else:
        write_worker_warning(con)
