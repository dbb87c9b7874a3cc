"""How an `interrupted` run is stopped on purpose: Ctrl-C, a SLURM cancel or time limit, a SIGTERM, or a person
holding it at a debugger breakpoint.

Ctrl-C follows real logs 08 and 10: the driver's `KeyboardInterrupt` raised in `ray.get`, often a
second one from `ray.shutdown` at exit, then the TaskRunner's buffered stdout (its last step lines)
flushed after the tracebacks, while its tqdm bar (stderr) already showed the true count.
"""

from __future__ import annotations

import time

from .chatter import write_partial_sample, write_preemption
from .console import Console, hex_id, log_ts
from .failures import Failure
from .tracebacks import SITE, driver_head, frame

TORCHRUN = f"{SITE}/torch/distributed"
DEBUGGER_DOCS = "https://docs.ray.io/en/latest/ray-observability/ray-distributed-debugger.html"


def interrupted(con: Console, phase: str | None) -> Failure:
    """Stop the run the way its `stop_reason` says."""
    return STOPS[con.spec.stop_reason](con, phase)


def keyboard(con: Console, phase: str | None) -> Failure:
    """Ctrl-C in the terminal: KeyboardInterrupt in the driver, then the TaskRunner's buffered output."""
    rng = con.rng
    if phase == "gen" and con.spec.rollout == "vllm":
        write_preemption(con, 10.0, int(rng.integers(2, 5)))
    con.clock += rng.uniform(20, 90)
    con.bare(*_driver_wait_frames(con))
    no = con.line_no
    con.bare("KeyboardInterrupt")
    if rng.random() < 0.7:
        con.bare("Error in atexit._run_exitfuncs:", "Traceback (most recent call last):",
                 *frame(f"{SITE}/ray/_private/client_mode_hook.py", 103, "wrapper", "return func(*args, **kwargs)"),
                 *frame(f"{SITE}/ray/_private/worker.py", 1921, "shutdown", "time.sleep(0.5)"),
                 "KeyboardInterrupt")
    con.release()
    return Failure(no, "KeyboardInterrupt", "KeyboardInterrupt")


def _driver_wait_frames(con: Console) -> list[str]:
    """The driver's traceback while it waits in `ray.get` for the TaskRunner (no verl worker frame)."""
    lines = driver_head(con, 2782, 903, "] = self.core_worker.get_objects(")
    lines += ['  File "python/ray/_raylet.pyx", line 3211, in ray._raylet.CoreWorker.get_objects',
              '  File "python/ray/includes/common.pxi", line 83, in ray._raylet.check_status']
    return lines


def time_limit(con: Console, phase: str | None) -> Failure:
    """SLURM ends the job at its time limit while training goes on normally (a busy job's CPU efficiency)."""
    return _slurm_stop(con, True)


def cancelled(con: Console, phase: str | None) -> Failure:
    """The user cancels the job with `scancel`."""
    return _slurm_stop(con, False)


def _slurm_stop(con: Console, timeout: bool) -> Failure:
    rng = con.rng
    con.clock += rng.uniform(5, 60)
    no, _ = slurm_cancel(con, timeout, rng.uniform(35.0, 85.0) if rng.random() < 0.6 else None)
    return Failure(no, "DUE TO TIME LIMIT" if timeout else "CANCELLED AT", "CANCELLED AT")


def slurm_cancel(con: Console, timeout: bool, cpu_efficiency: float | None) -> tuple[int, int | None]:
    """slurmstepd's cancel notice at the current clock; with `cpu_efficiency`, a `seff` epilogue after it.

    Returns the line numbers of the cancel notice and of the epilogue's `CPU Efficiency` (None without one).
    """
    rng, spec = con.rng, con.spec
    job = int(rng.integers(100000, 9999999))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(con.clock))
    why = " DUE TO TIME LIMIT" if timeout else ""
    srun = rng.random() < 0.5
    if srun:
        con.bare(f"srun: Job step aborted: Waiting up to {int(rng.integers(30, 65))} seconds for job step to finish.")
    no = con.line_no
    con.bare(f"slurmstepd: error: *** JOB {job} ON {spec.hostname} CANCELLED AT {stamp}{why} ***")
    if srun:
        con.bare(f"slurmstepd: error: *** STEP {job}.0 ON {spec.hostname} CANCELLED AT {stamp}{why} ***")
    if rng.random() < 0.4:
        _ray_sigterm(con)  # the job's processes get SIGTERM after the cancel
    if srun:
        con.bare(f"srun: error: {spec.hostname}: task 0: Terminated")
    if cpu_efficiency is None:
        return no, None
    return no, seff_epilogue(con, job, "TIMEOUT" if timeout else "CANCELLED", cpu_efficiency)


def seff_epilogue(con: Console, job: int, state: str, cpu_efficiency: float) -> int:
    """`seff <job>` as a cluster epilogue prints it; returns the line number of `CPU Efficiency`."""
    rng, spec = con.rng, con.spec
    wall = con.clock - spec.start_ts + rng.uniform(20, 90)  # the job started before Ray did
    cores = int(rng.choice([32, 64, 96, 128]))
    core_wall = wall * cores * spec.nnodes
    mem_total = float(rng.choice([512.0, 1024.0, 2048.0]))
    mem_used = mem_total * rng.uniform(0.2, 0.7)
    con.bare(f"Job ID: {job}", "Cluster: gpu-cluster", "User/Group: verl-user/verl-user",
             f"State: {state} (exit code 0)", f"Nodes: {spec.nnodes}", f"Cores per node: {cores}",
             f"CPU Utilized: {_seff_time(core_wall * cpu_efficiency / 100)}")
    no = con.line_no
    con.bare(f"CPU Efficiency: {cpu_efficiency:.2f}% of {_seff_time(core_wall)} core-walltime",
             f"Job Wall-clock time: {_seff_time(wall)}", f"Memory Utilized: {mem_used:.2f} GB",
             f"Memory Efficiency: {mem_used / mem_total * 100:.2f}% of {mem_total:.2f} GB")
    return no


def _seff_time(seconds: float) -> str:
    """seff's durations: `HH:MM:SS`, or `D-HH:MM:SS` from a day on."""
    s = int(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def sigterm(con: Console, phase: str | None) -> Failure:
    """A SIGTERM from outside: torchrun's agent, bash reporting the killed job, or Ray's signal handler."""
    con.clock += con.rng.uniform(5, 60)
    kind = int(con.rng.integers(3))
    if kind == 0:
        return _torchrun_sigterm(con)
    if kind == 1:
        no = con.line_no
        con.bare(f"./run_{con.spec.algo}.sh: line 27: {con.driver_pid} {'Terminated':<24}python3 -m "
                 'verl.trainer.main_ppo "$@"')
        return Failure(no, "Terminated", "Terminated")
    no = con.line_no
    _ray_sigterm(con)
    return Failure(no, "SIGTERM received", "SIGTERM received")


def _ray_sigterm(con: Console) -> None:
    """Ray's signal handler in the TaskRunner reports the SIGTERM it received."""
    rng = con.rng
    t = int(con.clock)
    con.runner(f"*** SIGTERM received at time={t} on cpu {int(rng.integers(0, 128))} ***",
               f"PC: @     0x7f{hex_id(rng, 10)}  (unknown)  epoll_wait",
               f"[{log_ts(con.clock)} E {con.runner_pid} {con.runner_pid}] logging.cc:440: *** SIGTERM received at "
               f"time={t} on cpu 3 ***")


def _torchrun_sigterm(con: Console) -> Failure:
    """torch elastic's agent (a launcher wrapping the driver) shuts its workers down and re-raises the signal."""
    rng = con.rng
    agent = con.driver_pid - int(rng.integers(5, 50))
    tm = time.gmtime(con.clock)
    stamp = f"W{tm.tm_mon:02d}{tm.tm_mday:02d} " + time.strftime("%H:%M:%S", tm) + f".{int(rng.integers(0, 1000)):03d}000"
    no = con.line_no
    con.bare(f"{stamp} {agent} torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death "
             "signal, shutting down workers",
             f"{stamp} {agent} torch/distributed/elastic/multiprocessing/api.py:900] Sending process {con.driver_pid} "
             "closing signal SIGTERM",
             "Traceback (most recent call last):",
             *frame("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
             *frame(f"{TORCHRUN}/elastic/multiprocessing/errors/__init__.py", 355, "wrapper", "return f(*args, **kwargs)"),
             *frame(f"{TORCHRUN}/run.py", 919, "main", "run(args)"),
             *frame(f"{TORCHRUN}/run.py", 910, "run", "elastic_launch("),
             *frame(f"{TORCHRUN}/launcher/api.py", 138, "__call__",
                    "return launch_agent(self._config, self._entrypoint, list(args))"),
             *frame(f"{TORCHRUN}/launcher/api.py", 260, "launch_agent", "result = agent.run()"),
             *frame(f"{TORCHRUN}/elastic/metrics/api.py", 137, "wrapper", "result = f(*args, **kwargs)"),
             *frame(f"{TORCHRUN}/elastic/agent/server/api.py", 711, "run", "result = self._invoke_run(role)"),
             *frame(f"{TORCHRUN}/elastic/agent/server/api.py", 870, "_invoke_run", "time.sleep(monitor_interval)"),
             *frame(f"{TORCHRUN}/elastic/multiprocessing/api.py", 84, "_terminate_process_handler",
                    'raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)'),
             f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {agent} got signal: 15")
    return Failure(no, "Received Signals.SIGTERM death signal", "SignalException")


def debugger(con: Console, phase: str | None) -> Failure:
    """A `breakpoint()` in the driver waits for Ray's debugger, and a person attaches to it (real log 35)."""
    no = breakpoint_wait(con, phase, attached=True)
    return Failure(no, "Waiting for debugger to attach", "Waiting for debugger to attach")


def breakpoint_wait(con: Console, phase: str | None, attached: bool) -> int:
    """Ray's distributed debugger at a driver `breakpoint()` (set-up code or the reward function): where it
    listens, that it waits, and, if `attached`, a client connecting. Returns the line number of the wait."""
    rng = con.rng
    if phase == "reward":
        write_partial_sample(con)
    con.runner(f"Ray debugger is listening on {con.spec.ip}:{int(rng.integers(30000, 60000))}")
    no = con.line_no
    con.runner(f"Waiting for debugger to attach (see {DEBUGGER_DOCS})...")
    if attached:
        con.clock += rng.uniform(60.0, 900.0)
        con.runner("Debugger client is connected")
    return no


STOPS = {"keyboard": keyboard, "time_limit": time_limit, "cancelled": cancelled, "sigterm": sigterm,
         "debugger": debugger}
