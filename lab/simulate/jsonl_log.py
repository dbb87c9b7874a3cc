"""The `file` logger backend: `<project>/<experiment>.jsonl`, rewritten ("wb") at every start-up."""

from __future__ import annotations

import json
import math
from typing import TextIO

import numpy as np

from .dynamics import RunTrace
from .metric_keys import INT_KEYS, NP_INT32_KEYS
from .spec import RunSpec

_CHUNK = 2000


def _column(key: str, values: list[float]) -> list:
    if key in INT_KEYS or key in NP_INT32_KEYS:
        return [int(v) for v in values]
    # orjson writes NaN and +-inf as null
    return [v if math.isfinite(v) else None for v in values]


def jsonl_segment(spec: RunSpec) -> int | None:
    """The launch whose records the file holds: the last one that reached `fit()` (None: no file)."""
    k = len(spec.segments) - 1
    if spec.failure_class != "completed" and spec.failure_phase == "startup":
        k -= 1  # the logger is created in fit(); a launch dying in start-up leaves the old file
    return k if k >= 0 else None


def write_jsonl(trace: RunTrace, out: TextIO, k: int) -> int:
    """Write the records of launch `k` (the file is truncated at each launch); return the line count."""
    spec = trace.spec
    seg = spec.segments[k]
    if k == len(spec.segments) - 1 and spec.failure_phase == "testing" and seg.end_step == seg.start_step:
        return 0  # died during the initial validation: the file was just truncated
    _, val_step, val_values = trace.val_lines[k]
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    val_data = {key: _column(key, [v])[0] for key, v in val_values.items()}
    out.write(dumps({"step": val_step, "data": val_data}) + "\n")
    idx = np.flatnonzero(trace.segment == k)
    for a in range(0, len(idx), _CHUNK):
        block = idx[a:a + _CHUNK]
        cols = {key: _column(key, trace.values[key][block].tolist()) for key in trace.keys}
        lines = [dumps({"step": int(trace.step[i]), "data": {key: cols[key][j] for key in trace.line_keys(int(i))}})
                 for j, i in enumerate(block)]
        out.write("\n".join(lines) + "\n")
    return len(idx) + 1
