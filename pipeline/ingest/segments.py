"""Where each line stands in its run: the resume segment it belongs to and the step in progress.

A config dump opens a segment (a start-up), so does a resume marker after steps, and a step number
lower than the last one; a step line sets the step, the lines after it belong to the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ConfigCollector
from .lines import Classified
from .steps import StepRows


@dataclass
class FileState:
    """Context carried from block to block within one file."""

    segment: int = 0
    started: bool = False
    steps_since_start: bool = False
    last_step: int | None = None
    collector: ConfigCollector | None = None

    def context(self) -> int:
        """The step in progress."""
        return 0 if self.last_step is None else self.last_step + 1


def line_context(n: int, cls: Classified, rows: StepRows, state: FileState) -> tuple[np.ndarray, np.ndarray]:
    """Segment and step in progress of every line (start-ups open segments; step lines move the step)."""
    events = [(int(i), 0, 0) for i in np.flatnonzero(cls.config_open)]
    events += [(int(i), 1, 0) for i in np.flatnonzero(cls.resume_marker)]
    events += [(i, 2, s) for i, s in rows.events]
    events.sort()
    seg0, ctx0 = state.segment, state.context()
    pos, segs, ctxs, own = [], [], [], []
    for i, typ, s in events:
        if typ == 0:
            if state.started or state.last_step is not None:
                state.segment += 1
            state.started, state.steps_since_start, state.last_step = True, False, None
        elif typ == 1:
            if state.steps_since_start:
                state.segment += 1
                state.started, state.steps_since_start, state.last_step = True, False, None
        else:
            if state.last_step is not None and s < state.last_step:
                state.segment += 1
            state.last_step, state.steps_since_start = s, True
            own.append((i, s))
        pos.append(i)
        segs.append(state.segment)
        ctxs.append(state.context())
    if not pos:
        return np.full(n, seg0, dtype=np.int32), np.full(n, ctx0, dtype=np.int64)
    j = np.searchsorted(np.array(pos), np.arange(n), side="right") - 1
    seg = np.where(j >= 0, np.array(segs, dtype=np.int32)[j], seg0).astype(np.int32)
    ctx = np.where(j >= 0, np.array(ctxs, dtype=np.int64)[j], ctx0).astype(np.int64)
    for i, s in own:
        ctx[i] = s
    return seg, ctx
