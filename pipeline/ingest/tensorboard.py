"""Scalars of TensorBoard event files (`events.out.tfevents.*`) as `step_metrics` rows (source 'tensorboard').

verl's TensorBoard logger writes each step's metrics with `SummaryWriter.add_scalar(key, value, step)`:
one `Summary.Value` with `simple_value` per key; TF2-style writers put a scalar tensor there instead.
The records are read by the `tensorboard` package's own loader (the optional extra
`verl-health[tensorboard]`), from a scratch copy of the file since archive members arrive as a stream.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

SOURCE = "tensorboard"
EVENT_FILE = re.compile(r"(?:^|/)events\.out\.tfevents\.[^/]*$")
BATCH_ROWS = 65536
SCHEMA = pa.schema([("step", pa.int64()), ("key", pa.string()), ("value", pa.float64()),
                    ("record", pa.int64()), ("ts", pa.timestamp("us"))])


def is_event_file(name: str) -> bool:
    """Whether a file of a run entry is a TensorBoard event file."""
    return EVENT_FILE.search(name) is not None


def _loader():
    """The tensorboard package's event file loader, or None when the extra is not installed."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    except ImportError:
        return None
    return EventFileLoader


def _scalar(value) -> float | None:
    """The float of a `Summary.Value` holding one scalar (simple_value or a 0-d tensor), else None."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        from tensorboard.util.tensor_util import make_ndarray

        try:
            arr = make_ndarray(value.tensor)
        except (ValueError, TypeError):
            return None
        if arr.size == 1 and arr.dtype.kind in "fiub":
            return float(arr.reshape(()))
    return None


def read_scalars(chunks: Iterator[bytes], name: str, scratch: Path, problems: list[str]) -> Iterator[pa.Table]:
    """Tables of (step, key, value, record, ts) for every scalar in one event file, in batches.

    `record` is the event's position in the file (the `line_no` of its rows). The chunks are always
    consumed, so an archive stream moves on even when the extra is missing.
    """
    loader = _loader()
    with tempfile.NamedTemporaryFile(dir=scratch, suffix=".tfevents") as copy:
        for chunk in chunks:
            copy.write(chunk)
        copy.flush()
        if loader is None:
            problems.append(f"{name}: TensorBoard event file not read: install verl-health[tensorboard]")
            return
        cols: dict[str, list] = {c: [] for c in SCHEMA.names}
        bad_times = 0
        try:
            for record, event in enumerate(loader(copy.name).Load(), start=1):
                if not event.HasField("summary"):
                    continue
                try:
                    ts = datetime.fromtimestamp(event.wall_time, UTC).replace(tzinfo=None)
                except (OverflowError, ValueError, OSError):  # a wall_time no datetime holds: the values are kept
                    ts, bad_times = None, bad_times + 1
                for value in event.summary.value:
                    number = _scalar(value)
                    if number is None:
                        continue
                    for col, item in zip(SCHEMA.names, (event.step, value.tag, number, record, ts), strict=True):
                        cols[col].append(item)
                if len(cols["step"]) >= BATCH_ROWS:
                    yield pa.table(cols, schema=SCHEMA)
                    cols = {c: [] for c in SCHEMA.names}
        except Exception as exc:  # a corrupt record ends the file, not the run's ingest
            problems.append(f"{name}: TensorBoard events unreadable after what was read "
                            f"({type(exc).__name__}: {exc})")
        if bad_times:
            problems.append(f"{name}: {bad_times} TensorBoard event(s) with a wall_time out of range: "
                            "their values kept without a time")
        if cols["step"]:
            yield pa.table(cols, schema=SCHEMA)

