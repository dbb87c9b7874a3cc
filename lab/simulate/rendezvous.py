"""torch.distributed's rendezvous fails while the rollout engine starts: an `nccl_timeout` before step 1.

SGLang's TP schedulers trip TCPStore's nonce check and the worker dies (real log 24); vLLM's workers
wait 600 s for the store and raise `DistNetworkError`. Ray often prints the worker's lines only after
the driver's traceback, so half of the runs show them in that order.
"""

from __future__ import annotations

from .console import Console, c10d_ts, log_ts
from .failures import CONNECTION_DETAIL, Failure, actor_died_lines, random_rank, raylet_died
from .tracebacks import SITE, VERL, driver_frames, frame, hydra_close, hydra_open, worker_frames

NONCE = ('RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED at "/pytorch/torch/csrc/distributed/c10d/'
         'TCPStore.cpp":418, please report a bug to PyTorch. Ping failed, invalid nonce returned')

# torch.distributed.init_process_group down to the TCPStore constructor: (file tail, line, function, source).
C10D_FRAMES = (
    ("torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
    ("torch/distributed/c10d_logger.py", 95, "wrapper", "func_return = func(*args, **kwargs)"),
    ("torch/distributed/distributed_c10d.py", 1710, "init_process_group",
     "store, rank, world_size = next(rendezvous_iterator)"),
    ("torch/distributed/rendezvous.py", 230, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
    ("torch/distributed/rendezvous.py", 198, "_create_c10d_store", "return TCPStore("),
)
SGLANG_FRAMES = (
    ("sglang/srt/managers/scheduler.py", 2534, "run_scheduler_process", "scheduler = Scheduler("),
    ("sglang/srt/managers/scheduler.py", 313, "__init__", "self.tp_worker = TpWorkerClass("),
    ("sglang/srt/managers/tp_worker.py", 84, "__init__", "self.model_runner = ModelRunner("),
    ("sglang/srt/model_executor/model_runner.py", 235, "__init__", "min_per_gpu_memory = self.init_torch_distributed()"),
    ("sglang/srt/model_executor/model_runner.py", 551, "init_torch_distributed", "init_distributed_environment("),
    ("sglang/srt/distributed/parallel_state.py", 1255, "init_distributed_environment",
     "torch.distributed.init_process_group("),
)
VLLM_FRAMES = (
    ("vllm/entrypoints/llm.py", 243, "__init__", "self.llm_engine = LLMEngine.from_engine_args("),
    ("vllm/engine/llm_engine.py", 281, "__init__", "self.model_executor = executor_class(vllm_config=vllm_config, )"),
    ("vllm/executor/executor_base.py", 52, "__init__", "self._init_executor()"),
    ("vllm/worker/worker.py", 172, "init_device",
     "init_worker_distributed_environment(self.vllm_config, self.rank, self.distributed_init_method,"),
    ("vllm/distributed/parallel_state.py", 981, "init_distributed_environment", "torch.distributed.init_process_group("),
)


def rendezvous_failure(con: Console) -> Failure:
    """The engine's process group never forms; the worker (SGLang) or its init (vLLM) fails the start-up."""
    con.clock += con.rng.uniform(20, 90)
    if con.spec.rollout == "sglang":
        return _sglang_nonce(con)
    return _vllm_socket_timeout(con)


def _site_frames(frames: tuple) -> list[str]:
    return [line for path, no, func, src in frames for line in frame(f"{SITE}/{path}", no, func, src)]


def _sglang_nonce(con: Console) -> Failure:
    rank = random_rank(con)
    driver_first = con.rng.random() < 0.5
    if driver_first:
        _driver_actor_died(con)
    no = _scheduler_tracebacks(con, rank)
    _store_resets(con, rank)
    if not driver_first:
        _driver_actor_died(con)
    return Failure(no, "nonce == returnedNonce INTERNAL ASSERT FAILED", "Ping failed, invalid nonce returned")


def _scheduler_tracebacks(con: Console, rank: int) -> int:
    """Every TP scheduler of the engine raises the nonce assert; returns the line of the first one."""
    stamp = log_ts(con.clock)[:19]
    first = None
    con.worker(f"[{stamp} TP0] Init torch distributed begin.", rank=rank)
    for tp in reversed(range(max(con.spec.tp, 2))):
        con.worker(f"[{stamp} TP{tp}] Scheduler hit an exception: Traceback (most recent call last):", rank=rank)
        for line in _site_frames(SGLANG_FRAMES + C10D_FRAMES):
            con.worker(line, rank=rank)
        first = first or con.line_no
        con.worker(NONCE, rank=rank)
        con.worker("", rank=rank)
    return first


def _store_resets(con: Console, failed: int) -> None:
    """The other ranks lose the TCPStore the dead scheduler held: NCCL's heartbeat monitor complains."""
    rng = con.rng
    con.clock += rng.uniform(10, 20)
    peer = (failed + 1) % con.spec.world_size
    stamp = c10d_ts(con.clock, int(rng.integers(0, 10**9)))
    host = con.spec.hostname
    con.worker(f"[rank{peer}]:[W{stamp} TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=81, "
               f"addr=[{host}]:{int(rng.integers(30000, 60000))}, remote=[{host}]:{int(rng.integers(30000, 60000))}): "
               "Connection reset by peer", rank=peer)
    con.worker("Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:675 (most recent "
               "call first):", rank=peer, repeated=con.spec.world_size - 2)
    con.worker(f"[rank{peer}]:[W{stamp} ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0(default_pg) Rank {peer}] Failed "
               'to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with '
               "error: Connection reset by peer", rank=peer, repeated=con.spec.world_size - 2)


def _driver_actor_died(con: Console) -> None:
    raylet_died(con, CONNECTION_DETAIL)
    hydra_open(con)
    con.bare(*driver_frames(con, "ActorDiedError", "startup"), *actor_died_lines(con, CONNECTION_DETAIL))
    hydra_close(con)


def _vllm_socket_timeout(con: Console) -> Failure:
    rng, spec = con.rng, con.spec
    rank = random_rank(con)
    con.clock += 600.0  # the client waits out its store timeout
    where = f"({spec.ip}, {int(rng.integers(20000, 60000))})"
    timed_out = f"The client socket has timed out after 600000ms while trying to connect to {where}."
    host, port = where.strip("()").split(", ")
    nanos = int(rng.integers(0, 9 * 10**8))
    con.worker(f"[E{c10d_ts(con.clock, nanos)} socket.cpp:1023] [c10d] {timed_out}", rank=rank)
    con.worker(f"[E{c10d_ts(con.clock, nanos + 121_337)} TCPStore.cpp:331] [c10d] TCP client failed to "
               f"connect/validate to host {host}:{port} - timed out (try=1, timeout=600000ms): {timed_out}", rank=rank)
    exc = "DistNetworkError"
    hydra_open(con)
    con.bare(*driver_frames(con, exc, "startup"), *worker_frames(con, exc, "startup", rank),
             *frame(f"{VERL}/workers/rollout/vllm_rollout/vllm_rollout_spmd.py", 142, "__init__",
                    "self.inference_engine = LLM("),
             *_site_frames(VLLM_FRAMES + C10D_FRAMES))
    # the exception Python raises is the causal line, not torch's glog line before it (real log 25's label)
    no = con.line_no
    con.bare(f"torch.distributed.DistNetworkError: {timed_out}")
    hydra_close(con)
    return Failure(no, "DistNetworkError: The client socket has timed out after 600000ms",
                   "torch.distributed.DistNetworkError")
