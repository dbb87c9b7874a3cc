"""Compose `train.log`: every start-up, step, surrounding chatter and the ending, in console order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

import numpy as np

from .chatter import (
    PHASE_HEADS,
    chatter_pool,
    memory_line,
    tqdm_bar,
    write_checkpoint_save,
    write_disk_warning,
    write_nonfinite_grad,
    write_preemption,
    write_progress,
    write_samples,
    write_val_pprint,
    write_validation_end,
    write_validation_start,
    write_worker_warning,
)
from .console import Console
from .dynamics import RunTrace
from .failures import WRITERS, Failure, completed_exit, interrupted
from .metric_keys import timers
from .number_format import format_column
from .startup import write_checkpoint_lookup, write_file_logger, write_launch, write_worker_init

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
        if phase == stop_phase and spec.failure_class == "hang":
            break  # the hang writer prints the phase's last lines itself
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
        session = time.strftime("session_%Y-%m-%d_%H-%M-%S", time.gmtime(spec.start_ts)) + f"_{spec.seed % 999983:06d}"
        write_disk_warning(con, session, 22.0 - 0.001 * step)
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


def _partial_step(con: Console, trace: RunTrace, phase: str, i_prev: int | None) -> None:
    """Activity of the step in progress when the run ended, using the previous step's sizes."""
    if i_prev is None or phase == "startup":
        return
    _step_activity(con, trace, i_prev, stop_phase=phase)


def write_train_log(trace: RunTrace, out: TextIO, worker_dir: Path | None = None) -> tuple[Failure | None, Console]:
    """Write the whole driver log of `trace` to `out` (and worker logs into `worker_dir`, if given).

    Returns where the failure's cause is, and the console (its clock is the run's end time);
    call `close()` on the console to finish the worker logs.
    """
    spec = trace.spec
    rng = np.random.default_rng([spec.seed, 104729])
    con = Console(spec, rng, out, worker_dir)
    failure: Failure | None = None
    pool = chatter_pool(con) if spec.chatter else []
    n_seg = len(spec.segments)
    for k, seg in enumerate(spec.segments):
        last_seg = k == n_seg - 1
        ending = spec.failure_class if last_seg else None
        write_launch(con, seg, first=k == 0)
        if ending == "python_exception" and spec.failure_phase == "startup":
            failure = WRITERS[ending](con, "startup")
            break
        write_worker_init(con)
        if ending in ("cuda_oom", "vllm_engine_error") and spec.failure_phase == "startup":
            failure = WRITERS[ending](con, "startup")
            break
        write_file_logger(con)
        write_checkpoint_lookup(con, seg)
        _, val_step, val_values = trace.val_lines[k]
        write_validation_start(con, val_step)
        if ending and spec.failure_phase == "testing" and seg.end_step == seg.start_step:
            failure = WRITERS[ending](con, "testing")
            break
        con.clock += float(trace.values["timing_s/testing"][0]) if len(trace.step) else 30.0
        write_validation_end(con)
        write_progress(con, tqdm_bar(seg.start_step, spec.total_steps, 0.0, 0))
        write_val_pprint(con, "Initial validation metrics", val_values)
        fmt = spec.fmt
        con.runner(f"step:{val_step} - " + " - ".join(
            f"{key}:{format_column(key, fmt, [val])[0]}" for key, val in val_values.items()))
        idx = np.flatnonzero(trace.segment == k)
        seg_start_clock = con.clock
        for a in range(0, len(idx), _CHUNK):
            block = idx[a:a + _CHUNK]
            cols = {key: format_column(key, fmt, trace.values[key][block].tolist()) for key in trace.keys}
            for j, i in enumerate(block):
                spent = _step_activity(con, trace, int(i))
                step = int(trace.step[i])
                keys = trace.line_keys(int(i))
                con.runner(f"step:{step} - " + " - ".join(f"{key}:{cols[key][j]}" for key in keys))
                con.clock += float(trace.wall_s[i]) - spent
                write_progress(con, tqdm_bar(step, spec.total_steps, con.clock - seg_start_clock, a + j + 1))
                if last_seg and spec.failure_class == "completed" and step == spec.total_steps:
                    write_val_pprint(con, "Final validation metrics",
                                     {key: float(trace.values[key][i]) for key in keys if key.startswith("val-")})
                if spec.chatter:
                    con.lines.extend(pool[(step * 7 + c) % len(pool)] for c in range(spec.chatter))
                con.flush()
        i_prev = int(idx[-1]) if len(idx) else None
        if not last_seg:
            phase = str(rng.choice(["gen", "update_actor", "old_log_prob"]))
            _partial_step(con, trace, phase, i_prev)
            interrupted(con, seg.interrupt or "killed", phase)
        elif spec.failure_class == "completed":
            completed_exit(con)
        else:
            _partial_step(con, trace, spec.failure_phase, i_prev)
            failure = WRITERS[spec.failure_class](con, spec.failure_phase)
    con.flush(force=True)
    return failure, con
