"""GPU memory lines as `step_metrics` rows: per (segment, step, key) the largest value printed, with
its earliest line; the later segment wins a step."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .schemas import STEP_METRICS_SCHEMA
from .steps import MEMORY_KEYS, SOURCE_NAMES, SRC_MEMORY, MemoryRows

MEMORY_KEY_NAMES = pa.array(MEMORY_KEYS, pa.string())


def block_maxima(memory: MemoryRows, seg: np.ndarray, ctx: np.ndarray, name: str, first: int) -> pa.Table:
    """Keep the largest value of each run of rows of one (segment, step, key) in this block, with its
    earliest line. Few rows per step are left for `memory_table`, which reduces them exactly."""
    step, segment = ctx[memory.line_idx], seg[memory.line_idx]
    at, best, line = run_maxima([memory.key, segment, step], memory.value, memory.line_idx + first)
    return pa.table(
        {
            "segment": pa.array(segment[at], pa.int32()),
            "step": pa.array(step[at], pa.int64()),
            "key": MEMORY_KEY_NAMES.take(pa.array(memory.key[at])),
            "value": pa.array(best, pa.float64()),
            "file": pa.array([name] * len(at), pa.string()),
            "line_no": pa.array(line, pa.int64()),
        }
    )


def memory_table(blocks: list[pa.Table]) -> pa.Table:
    """The memory values of the steps from every block's maxima: the largest, the later segment winning."""
    if not blocks:
        return STEP_METRICS_SCHEMA.empty_table()
    t = _largest(pa.concat_tables(blocks))
    t = t.sort_by([("step", "ascending"), ("key", "ascending"), ("segment", "descending")])
    first = t.group_by(["step", "key"], use_threads=False).aggregate(
        [(c, "first") for c in ("value", "segment", "file", "line_no")]
    )
    n = first.num_rows
    return pa.table(
        {
            "step": first.column("step"),
            "key": first.column("key"),
            "value": first.column("value_first"),
            "source": pa.array([SOURCE_NAMES[SRC_MEMORY]] * n, pa.string()),
            "segment": first.column("segment_first"),
            "file": first.column("file_first"),
            "line_no": first.column("line_no_first"),
        }
    ).cast(STEP_METRICS_SCHEMA)


def run_maxima(
    keys: list[np.ndarray], value: np.ndarray, line_no: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over each run of adjacent rows with equal `keys`: its first row, largest value, and the smallest
    line number holding that value. One pass of numpy, no sort: memory lines arrive in line order,
    so one (segment, step, key) is usually one run.
    """
    change = np.zeros(len(value), dtype=bool)
    change[:1] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    first = np.flatnonzero(change)
    best = np.maximum.reduceat(value, first)
    at_best = np.where(value == best[np.cumsum(change) - 1], line_no, np.iinfo(np.int64).max)
    return first, best, np.minimum.reduceat(at_best, first)


def _largest(t: pa.Table) -> pa.Table:
    """One row per (segment, step, key): the one with the largest value (the earliest line on ties)."""
    t = t.sort_by(
        [
            ("segment", "ascending"),
            ("step", "ascending"),
            ("key", "ascending"),
            ("value", "descending"),
            ("line_no", "ascending"),
        ]
    )
    g = t.group_by(["segment", "step", "key"], use_threads=False).aggregate(
        [(c, "first") for c in ("value", "file", "line_no")]
    )
    return g.rename_columns(["segment", "step", "key", "value", "file", "line_no"])
