"""How a run stops without an error: a `hang` shows that it stalled, a `no_outcome` log just ends.

A hang is only labelled where the log itself shows the stall: warnings whose timestamps run on for
well over 10 minutes and over three normal steps, a progress bar redrawn at the same count much
later, a debugger breakpoint waiting, or SLURM's epilogue showing the job idle until its time limit.
"""

from __future__ import annotations

import math

from .chatter import reprint_bar, write_disk_warning, write_partial_sample, write_preemption
from .console import Console
from .failures import Failure
from .interrupts import breakpoint_wait, slurm_cancel

STALL_MIN_S = 600.0


def stall_seconds(con: Console) -> float:
    """How long a stalled run sits without progress: well over 10 minutes and over three normal steps."""
    return max(STALL_MIN_S, 3 * con.step_seconds) * con.rng.uniform(1.6, 3.5)


def hang(con: Console, phase: str | None) -> Failure:
    """Stall the run, leaving the evidence its `hang_evidence` names."""
    return EVIDENCE[con.spec.hang_evidence](con, phase)


def repeated_warnings(con: Console, phase: str | None) -> Failure:
    """The same warning keeps coming for the whole stall: vLLM preemption in generation, else the raylet's
    periodic disk monitor; the last one shows how long nothing else happened."""
    rng = con.rng
    stall = stall_seconds(con)
    end = con.clock + stall
    free_gb = rng.uniform(5.0, 20.0)
    while True:
        no = con.line_no
        if phase == "gen":
            write_preemption(con, 0.0, 1)
            gap = rng.uniform(20.0, 90.0)
        else:
            write_disk_warning(con, free_gb)
            gap = 10.0
        if con.clock >= end:
            break
        con.clock = min(end, con.clock + gap)
    contains = "is preempted by PreemptionMode.RECOMPUTE" if phase == "gen" else "is over 95% full"
    return Failure(no, contains, None, f"no progress for {round(stall / 60)} min (timestamps)")


def stuck_bar(con: Console, phase: str | None) -> Failure:
    """tqdm redraws the `Training Progress` bar long after its last step: same count, much more time."""
    stall = stall_seconds(con)
    con.clock += stall
    no = con.line_no
    text = reprint_bar(con)
    n = con.bar[0]
    contains = text[text.index(f"{n}/{con.spec.total_steps} ["):].split("<")[0]
    return Failure(no, contains, None, f"progress bar stuck at {n}/{con.spec.total_steps} for {round(stall / 60)} min")


def debugger(con: Console, phase: str | None) -> Failure:
    """A `breakpoint()` in the driver (set-up code or the reward function) waits for a debugger nobody attaches."""
    no = breakpoint_wait(con, phase, attached=False)
    return Failure(no, "Waiting for debugger to attach", "Ray debugger is listening on", "debugger breakpoint")


def idle_until_time_limit(con: Console, phase: str | None) -> Failure:
    """The job sits idle until SLURM's time limit; the `seff` epilogue shows ~0% CPU over the job."""
    rng, spec = con.rng, con.spec
    active = con.clock - spec.start_ts
    busy = rng.uniform(40.0, 80.0)  # % CPU while it trained
    wall = max(active * busy / rng.uniform(0.3, 1.5), active + stall_seconds(con))
    wall = math.ceil(wall / 3600) * 3600  # time limits are whole hours
    con.clock = spec.start_ts + wall
    efficiency = (active * busy + (wall - active) * 0.02) / wall
    _, no = slurm_cancel(con, True, efficiency)
    return Failure(no, f"CPU Efficiency: {efficiency:.2f}%", "DUE TO TIME LIMIT", f"slurm epilogue {efficiency:.2f}% CPU")


def no_outcome(con: Console, phase: str | None) -> None:
    """The log ends mid-step with no error and no sign of a stall (a snapshot, a capture that stopped)."""
    if phase == "gen":
        _generation_at_pace(con)
    elif phase == "reward":
        write_partial_sample(con)
    elif phase == "testing":
        con.runner("validation generation end")
        write_partial_sample(con)


def _generation_at_pace(con: Console) -> None:
    """A few timestamped worker warnings early in the rollout: time passes as usual, then the log ends."""
    rng = con.rng
    span = min(0.4 * con.step_seconds, 240.0)
    offsets = sorted(rng.uniform(0.0, span, int(rng.integers(2, 5))).tolist())
    for offset in offsets:
        if con.spec.rollout == "vllm":
            write_preemption(con, offset, 1)
        else:
            con.worker(f"WARNING:{con.ts(offset)}:Token indices sequence length is longer than the specified maximum "
                       "sequence length for this model", rank=int(rng.integers(con.spec.world_size)))
    con.clock += offsets[-1]


EVIDENCE = {"timestamps": repeated_warnings, "progress_bar": stuck_bar, "debugger": debugger,
            "slurm_idle": idle_until_time_limit}
