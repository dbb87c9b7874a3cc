"""Compose the driver log: every start-up, step, surrounding chatter and the ending, in console order."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import numpy as np

from .chatter import (
    advance_bar,
    chatter_pool,
    memory_line,
    start_bar,
    write_checkpoint_save,
    write_disk_warning,
    write_nonfinite_grad,
    write_preemption,
    write_samples,
    write_val_pprint,
    write_validation_end,
    write_validation_start,
    write_worker_warning,
)
from .console import Console
from .dynamics import RunTrace
from .endings import WRITERS
from .failures import Failure, completed_exit, segment_end
from .metric_keys import timers
from .number_format import format_column
from .spec import RunSpec
from .startup import write_checkpoint_lookup, write_launch, write_tracking, write_worker_init
from .vocab import PHASE_HEADS

_CHUNK = 2000


def _in_episode(trace: RunTrace, cls: str, step: int) -> bool:
    return any(e.cls == cls and e.first_step <= step <= e.last_step for e in trace.episodes)


def _step_activity(con: Console, trace: RunTrace, i: int, stop_phase: str | None = None) -> float:
    """Print what workers print while step i runs, advancing the clock; return the seconds advanced.

    With `stop_phase`, stop as that phase starts (the run crashes or hangs there).
    """
    spec, v = trace.spec, trace.values
    step = int(trace.step[i])
    final = trace.segment[i] == len(spec.segments) - 1
    alloc = float(v["perf/max_memory_allocated_gb"][i])
    offset = 0.0
    for phase in timers(spec)[:-1]:
        heads = PHASE_HEADS.get(phase)
        if spec.debug_memory and heads:
            for head in heads[0]:
                memory_line(con, head, alloc * 0.62, offset)
        if phase == stop_phase:
            break
        dur = float(v[f"timing_s/{phase}"][i])
        if phase == "gen" and final and spec.rollout == "vllm" and _in_episode(trace, "gen_slowdown", step):
            write_preemption(con, offset + dur / 2, int(con.rng.integers(1, 4)))
        offset += dur
        if spec.debug_memory and heads:
            for head in heads[1]:
                memory_line(con, head, alloc, offset)
        if phase == "reward" and spec.samples_every_step:
            write_samples(con, 1.0 if con.rng.random() < float(v["critic/score/mean"][i]) else 0.0)
        if phase == "update_actor" and final and _in_episode(trace, "nan_loss", step):
            write_nonfinite_grad(con)
    con.clock += offset
    if stop_phase in PHASE_HEADS or stop_phase in ("gen", "reward"):
        return offset
    if con.rng.random() < 0.08:
        write_worker_warning(con)
    if spec.disk_warnings and step % 5 == 0:
        write_disk_warning(con, 22.0 - 0.001 * step)
    if trace.is_test[i] or stop_phase == "testing":
        write_validation_start(con, step)
        if stop_phase == "testing":
            return offset
        testing = float(v["timing_s/testing"][i])
        con.clock += testing
        offset += testing
        write_validation_end(con)
    if trace.is_save[i] or stop_phase == "save_checkpoint":
        if stop_phase == "save_checkpoint":
            rel = f"checkpoints/{spec.project}/{spec.experiment}/global_step_{step}"
            con.runner(f"local_global_step_folder: {rel}")
            return offset
        write_checkpoint_save(con, step)
    return offset


def _partial_step(con: Console, trace: RunTrace, phase: str | None, i_prev: int | None) -> None:
    """Activity of the step in progress when the run ended, using the previous step's sizes."""
    if phase in (None, "startup"):
        return
    if i_prev is not None:
        _step_activity(con, trace, i_prev, stop_phase=phase)
    elif trace.spec.debug_memory and phase in PHASE_HEADS:
        # step 1 has no earlier step to size it by: the weights alone fill about half the device
        for head in PHASE_HEADS[phase][0]:
            memory_line(con, head, trace.spec.gpu_total_gb * 0.45, 0.0)


def _hold_from(spec: RunSpec) -> int | None:
    """The first step whose TaskRunner output stays buffered until the Ctrl-C traceback (None: no buffering)."""
    return spec.last_step - spec.buffered_steps + 1 if spec.buffered_steps else None


def write_train_log(trace: RunTrace, out: TextIO, worker_dir: Path | None = None) -> tuple[Failure | None, Console]:
    """Write the whole driver log of `trace` to `out` (and worker logs into `worker_dir`, if given).

    A wandb capture (`spec.capture == "wandb"`) writes only what the TaskRunner printed after wandb.init,
    as `files/output.log` holds it. Returns where the failure's cause is, and the console (its clock is
    the run's end time); call `close()` on the console to finish the worker logs.
    """
    spec = trace.spec
    rng = np.random.default_rng([spec.seed, 104729])
    con = Console(spec, rng, out, worker_dir)
    pool = chatter_pool(con) if spec.chatter else []
    for k, seg in enumerate(spec.segments):
        last_seg = k == len(spec.segments) - 1
        ending = spec.failure_class if last_seg else None
        ended, failure = _launch(con, trace, k, ending)
        if ended:
            break
        i_prev = _training(con, trace, k, pool, last_seg)
        if not last_seg:
            phase = str(rng.choice(["gen", "update_actor", "old_log_prob"]))
            _partial_step(con, trace, phase, i_prev)
            segment_end(con, seg.interrupt or "killed", phase)
        elif spec.failure_class == "completed":
            completed_exit(con)
        else:
            _partial_step(con, trace, spec.failure_phase, i_prev)
            failure = WRITERS[spec.failure_class](con, spec.failure_phase)
    con.flush(force=True)
    return failure, con


def _launch(con: Console, trace: RunTrace, k: int, ending: str | None) -> tuple[bool, Failure | None]:
    """Start-up of launch k up to the initial validation: (True, its failure) if the run ends there."""
    spec, seg = trace.spec, trace.spec.segments[k]
    write_launch(con, seg, first=k == 0)
    if ending == "python_exception" and spec.failure_phase == "startup":
        return True, WRITERS[ending](con, "startup")  # the reward function is loaded before the workers start
    write_worker_init(con)
    if ending and spec.failure_phase == "startup":
        return True, WRITERS[ending](con, "startup")
    write_tracking(con)
    write_checkpoint_lookup(con, seg)
    _, val_step, val_values = trace.val_lines[k]
    write_validation_start(con, val_step)
    if ending and spec.failure_phase == "testing" and seg.end_step == seg.start_step:
        return True, WRITERS[ending](con, "testing")
    con.clock += float(trace.values["timing_s/testing"][0]) if len(trace.step) else 30.0
    if ending and _hold_from(spec) == val_step:
        con.hold()
    write_validation_end(con)
    start_bar(con, seg.start_step)
    write_val_pprint(con, "Initial validation metrics", val_values)
    if spec.step_lines:
        con.runner(f"step:{val_step} - " + " - ".join(
            f"{key}:{format_column(key, spec.fmt, [val])[0]}" for key, val in val_values.items()))
    return False, None


def _training(con: Console, trace: RunTrace, k: int, pool: list[str], last_seg: bool) -> int | None:
    """Every step of launch k: activity, step line, progress bar; returns the last step's position."""
    spec = trace.spec
    hold_from = _hold_from(spec) if last_seg else None
    idx = np.flatnonzero(trace.segment == k)
    for a in range(0, len(idx), _CHUNK):
        block = idx[a:a + _CHUNK]
        cols = {key: format_column(key, spec.fmt, trace.values[key][block].tolist()) for key in trace.keys}
        for j, i in enumerate(block):
            step = int(trace.step[i])
            if step == hold_from:
                con.hold()
            spent = _step_activity(con, trace, int(i))
            keys = trace.line_keys(int(i))
            if spec.step_lines:
                con.runner(f"step:{step} - " + " - ".join(f"{key}:{cols[key][j]}" for key in keys))
            con.clock += float(trace.wall_s[i]) - spent
            advance_bar(con, step)
            if last_seg and spec.failure_class == "completed" and step == spec.total_steps:
                write_val_pprint(con, "Final validation metrics",
                                 {key: float(trace.values[key][i]) for key in keys if key.startswith("val-")})
            if pool:
                con.lines.extend(pool[(step * 7 + c) % len(pool)] for c in range(spec.chatter))
            con.flush()
    return int(idx[-1]) if len(idx) else None
