"""The driver console as `tee` captures it: Ray prefixes, ANSI colours, dedup suffixes, timestamps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

import numpy as np

from .spec import RunSpec

CYAN, YELLOW, GREEN, RESET = "\x1b[36m", "\x1b[33m", "\x1b[32m", "\x1b[0m"
_FLUSH_LINES = 20_000


def hex_id(rng: np.random.Generator, n: int) -> str:
    """`n` random lowercase hex digits (Ray ids, addresses)."""
    return "".join("0123456789abcdef"[i] for i in rng.integers(0, 16, n))


def log_ts(t: float) -> str:
    """Python logging `asctime`: `2025-06-28 18:06:41,828`."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f",{int((t % 1) * 1000):03d}"


def c10d_ts(t: float, nanos: int) -> str:
    """torch's c10 log timestamp after the level letter: `419 10:42:28.858931807` (month not zero-padded)."""
    tm = time.gmtime(t)
    return f"{tm.tm_mon}{tm.tm_mday:02d} " + time.strftime("%H:%M:%S", tm) + f".{nanos:09d}"


def vllm_ts(t: float) -> str:
    """vLLM's own log timestamp: `08-02 00:36:03`."""
    return time.strftime("%m-%d %H:%M:%S", time.gmtime(t))


class Console:
    """Collects the lines of `train.log` (and of worker logs) in order, writing them out in bulk."""

    def __init__(self, spec: RunSpec, rng: np.random.Generator, out: TextIO, worker_dir: Path | None = None):
        self.spec, self.rng, self.out = spec, rng, out
        self.lines: list[str] = []
        self.flushed = 0
        self.clock = spec.start_ts
        self.new_processes()
        self.worker_dir = worker_dir
        self.worker_files: dict[int, TextIO] = {}
        # a wandb capture holds only the TaskRunner's own output, from wandb.init on, without Ray prefixes
        self.wandb = spec.capture == "wandb"
        self.capturing = not self.wandb
        self.held: list[str] | None = None
        self.wandb_run: str | None = None  # the wandb run folder and its start, once wandb.init has run
        self.wandb_started = self.clock
        # the progress bar: its count, when it opened, steps done since, when it last moved
        self.bar = (0, self.clock, 0, self.clock)

    def new_processes(self) -> None:
        """Draw the pids of a fresh launch: the driver, the TaskRunner and one WorkerDict per GPU."""
        self.runner_pid = int(self.rng.integers(2000, 400_000))
        self.driver_pid = self.runner_pid - int(self.rng.integers(300, 1500))
        self.worker_pids = [self.runner_pid + 1500 + 3 * i + int(self.rng.integers(0, 3))
                            for i in range(self.spec.world_size)]

    @property
    def line_no(self) -> int:
        """1-based number of the next line to be written."""
        return self.flushed + len(self.lines) + 1

    def _prefix(self, name: str, pid: int, ip: str | None = None) -> str:
        inner = f"({name} pid={pid}, ip={ip})" if ip else f"({name} pid={pid})"
        return f"{CYAN}{inner}{RESET}" if self.spec.ansi else inner

    def _suffix(self, repeated: int) -> str:
        if repeated < 2:
            return ""
        text = f" [repeated {repeated}x across cluster]"
        return f"{GREEN}{text}{RESET}" if self.spec.ansi else text

    def bare(self, *texts: str) -> None:
        """Lines printed by the driver process itself (no Ray prefix)."""
        if not self.wandb:
            self.lines.extend(texts)

    def runner(self, *texts: str) -> None:
        """Lines the TaskRunner (or `main_task` in old verl) prints to stdout: held back while `hold` is on."""
        self._runner_lines(self.held if self.held is not None else self.lines, texts)

    def runner_err(self, *texts: str) -> None:
        """Lines the TaskRunner writes to stderr (tqdm bars): never held back."""
        self._runner_lines(self.lines, texts)

    def _runner_lines(self, target: list[str], texts: tuple[str, ...]) -> None:
        if self.wandb:
            if self.capturing:
                target.extend(t.lstrip("\r") for t in texts)
            return
        p = self._prefix(self.spec.runner_name, self.runner_pid)
        target.extend(f"{p} {t}" if t else p for t in texts)

    def start_capture(self) -> None:
        """wandb.init has returned: from here on a wandb capture records the TaskRunner's output."""
        self.capturing = True

    def hold(self) -> None:
        """From now on the TaskRunner's stdout stays in its buffer (block-buffered, unlike stderr)."""
        if self.held is None:
            self.held = []

    def release(self) -> None:
        """The TaskRunner exits: its buffered stdout reaches the log."""
        if self.held:
            self.lines.extend(self.held)
        self.held = None

    def worker(self, text: str, rank: int = 0, repeated: int = 0) -> None:
        """A WorkerDict line of `rank`, optionally deduplicated by Ray across the cluster."""
        if self.wandb:
            return
        pid = self.worker_pids[rank % len(self.worker_pids)]
        remote = self.spec.nnodes > 1 and rank >= self.spec.n_gpus_per_node
        p = self._prefix("WorkerDict", pid, self.spec.ip if remote else None)
        self.lines.append(f"{p} {text}{self._suffix(repeated)}")
        if self.worker_dir is not None:
            self._worker_file(pid).write(text + "\n")

    def _worker_file(self, pid: int) -> TextIO:
        if pid not in self.worker_files:
            name = f"worker-{hex_id(np.random.default_rng([self.spec.seed, 31, pid]), 56)}-01000000-{pid}.err"
            self.worker_files[pid] = open(self.worker_dir / name, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        return self.worker_files[pid]

    def actor(self, name: str, pid: int, text: str, repeated: int = 0) -> None:
        """A line of another Ray process: `vLLMHttpServer`, `AgentLoopWorker`, or a bare `(pid=N)` when name is empty."""
        if self.wandb:
            return
        inner = f"({name} pid={pid})" if name else f"(pid={pid})"
        p = f"{CYAN}{inner}{RESET}" if self.spec.ansi else inner
        self.lines.append(f"{p} {text}{self._suffix(repeated)}")

    def raylet(self, text: str) -> None:
        """A raylet line (yellow prefix)."""
        if self.wandb:
            return
        p = f"{YELLOW}(raylet){RESET}" if self.spec.ansi else "(raylet)"
        self.lines.append(f"{p} {text}")

    @property
    def step_seconds(self) -> float:
        """The run's normal wall time per step so far, as its progress bar's rate shows it."""
        _, started, done, updated = self.bar
        return (updated - started) / done if done else 300.0

    def ts(self, offset: float = 0.0) -> str:
        """Logging timestamp `offset` seconds after the current clock."""
        return log_ts(self.clock + offset)

    def close(self) -> list[str]:
        """Flush everything; close the worker logs and return their names (sorted)."""
        self.flush(force=True)
        names = []
        for fh in self.worker_files.values():
            names.append(Path(fh.name).name)
            fh.close()
        return sorted(names)

    def flush(self, force: bool = False) -> None:
        """Write buffered lines to the file when enough have accumulated."""
        if self.lines and (force or len(self.lines) >= _FLUSH_LINES):
            self.out.write("\n".join(self.lines))
            self.out.write("\n")
            self.flushed += len(self.lines)
            self.lines = []
