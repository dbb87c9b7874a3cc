"""Metric values from step lines: verl console lines (all number formats, hard-wrapped too), the JSONL
file logger, the seed-article formats and GPU memory lines.

Only the few lines of kind `step_metrics`/`memory` reach this module; pairs are split and parsed
with Arrow kernels. Rows whose step is -1 take the step in progress of their line later.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STEP_HEAD = re.compile(r"(?:^|\s)step:(\d+) - ")
GLOBAL_STEP = re.compile(r"training/global_step:(?:np\.\w+\()?(\d+)(?:\.0+)?\)?(?: |$)")
PREFIX = re.compile(r"^\([^)]*\) ?")
FRAGMENT = re.compile(r"^(?!\([^)]*\) )[ -]*\S+(?: - \S+)*[ -]*$")
SINGLE_TOKEN = re.compile(r"^[^\s(]\S*$")
REPEATED_RE = r"\s*\[repeated \d+x across cluster\].*$"
NP_WRAPPED_RE = r"^np\.[a-z]+\d*\(([^()]*)\)?$"  # the ) can be lost when a log is cut
NUMBER_RE = r"^[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)$"
V04_RE = r"^-?\d+\.\d{3}$"
SEED_KV = re.compile(r"(?:^|\s)step=(\d+)((?:,\s*[\w/@.-]+=[^,\s]+)+)")
SEED_TIMING = re.compile(r"\[INFO\] step: ([\w/.@-]+): ([-+\d.eE]+) ?ms")
JSON_START = re.compile(r'\{"step"')
MEMORY_KEYS = (
    "memory/allocated_gb_max",
    "memory/reserved_gb_max",
    "memory/device_used_gb_max",
    "memory/device_total_gb",
)
MIN_WRAP_WIDTH = 60
SOURCE_NAMES = ("console", "jsonl", "seed_kv", "seed_timing", "memory_line")
SRC_CONSOLE, SRC_JSONL, SRC_SEED_KV, SRC_SEED_TIMING, SRC_MEMORY = range(5)


@dataclass
class StepRows:
    """Raw metric rows of one block, before reconciliation."""

    step: list = field(default_factory=list)
    key: list = field(default_factory=list)
    value: list = field(default_factory=list)
    source: list = field(default_factory=list)
    line_idx: list = field(default_factory=list)
    arrow: list = field(default_factory=list)  # vectorised parts: pa.Table with the same columns
    events: list = field(default_factory=list)  # (line_idx, step) of console/seed step lines
    tails: list = field(default_factory=list)  # last pieces of wrapped step lines not classified as such
    n_step_lines: int = 0
    n_failures: int = 0
    n_values: int = 0
    n_console: int = 0
    n_np: int = 0
    n_v04: int = 0
    n_v04_sampled: int = 0
    n_seed: int = 0
    problems: list = field(default_factory=list)  # (line_idx, message)

    def add(self, step: int, key: str, value: float, source: int, line_idx: int) -> None:
        """Append one parsed value."""
        self.step.append(step)
        self.key.append(key)
        self.value.append(value)
        self.source.append(source)
        self.line_idx.append(line_idx)

    def table(self) -> pa.Table:
        """All rows as one table (step, key, value, source, line_idx)."""
        parts = list(self.arrow)
        if self.step:
            parts.append(
                pa.table(
                    {
                        "step": pa.array(self.step, pa.int64()),
                        "key": pa.array(self.key, pa.string()),
                        "value": pa.array(self.value, pa.float64()),
                        "source": pa.array(self.source, pa.int8()),
                        "line_idx": pa.array(self.line_idx, pa.int64()),
                    }
                )
            )
        if not parts:
            return ROWS_SCHEMA.empty_table()
        return pa.concat_tables(parts)


ROWS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("key", pa.string()),
        ("value", pa.float64()),
        ("source", pa.int8()),
        ("line_idx", pa.int64()),
    ]
)


def parse_step_lines(text: pa.StringArray, idx: np.ndarray, rows: StepRows) -> None:
    """Parse the step-metric lines at positions `idx` of `text` (console, wrapped, JSONL, seed formats)."""
    if len(idx) == 0:
        return
    lines = text.take(pa.array(idx)).to_pylist()
    console_idx, console_text = [], []
    groups = _wrap_groups(text, idx, lines, rows.tails)
    for start, joined in groups:
        m = STEP_HEAD.search(joined)
        if m:
            step = int(m.group(1))
            rows.events.append((start, step))
            rows.n_step_lines += 1
            console_idx.append((start, step))
            console_text.append(joined[m.end() :])
            continue
        g = GLOBAL_STEP.search(joined)
        if g:
            step = int(g.group(1))
            rows.events.append((start, step))
            rows.n_step_lines += 1
            console_idx.append((start, step))
            console_text.append(joined)
            continue
        line = PREFIX.sub("", joined, count=1)
        if JSON_START.match(line):
            _parse_jsonl(line, start, rows)
        elif SEED_KV.search(line):
            _parse_seed_kv(line, start, rows)
        elif SEED_TIMING.search(line):
            _parse_seed_timing(line, start, rows)
        elif " - " in line:
            n_pairs = line.count(" - ") + 1
            rows.problems.append(
                (
                    start,
                    "metric pairs without a step number (a wrapped step line whose start is missing): "
                    f"about {n_pairs} pairs not attributed",
                )
            )
    if console_text:
        _parse_console(console_text, console_idx, rows)


def _wrap_groups(
    text: pa.StringArray, idx: np.ndarray, lines: list[str], tails: list
) -> list[tuple[int, str]]:
    """Group a step line with the hard-wrapped pieces that follow it; returns (first line, joined text)."""
    groups: list[list] = []  # [start, last, width, pieces]
    for i, line in zip(idx.tolist(), lines, strict=False):
        cur = groups[-1] if groups else None
        if (
            cur is not None
            and i == cur[1] + 1
            and " - " in cur[3][0]
            and not line.startswith(("{", "["))
            and cur[2] >= MIN_WRAP_WIDTH
            and len(cur[3][-1]) >= cur[2] - 1
            and not STEP_HEAD.search(line)
            and FRAGMENT.match(line)
        ):
            cur[1], cur[2] = i, max(cur[2], len(line))
            cur[3].append(line)
        else:
            groups.append([i, i, len(line), [line]])
    n = len(text)
    for g in groups:
        if len(g[3]) > 1 and len(g[3][-1]) >= g[2] - 1 and g[1] + 1 < n:
            tail = text[g[1] + 1].as_py()
            if tail and SINGLE_TOKEN.match(tail):
                g[1] += 1
                g[3].append(tail)
                tails.append(g[1])
    return [(g[0], _join(g[3])) for g in groups]


def _join(pieces: list[str]) -> str:
    out = pieces[0]
    for piece in pieces[1:]:
        if (
            out.endswith(" -")
            and not piece.startswith(" ")
            or out.endswith(" ") is False
            and piece.startswith("- ")
        ):
            out += " "
        out += piece
    return out


def nth(lists: pa.Array, i: int) -> pa.Array:
    """Element i of each list, null where a list is shorter (or null)."""
    long_enough = pc.fill_null(pc.greater(pc.list_value_length(lists), i), False)
    padded = pc.if_else(long_enough, lists, pa.scalar([None] * (i + 1), type=lists.type))
    return pc.list_element(padded, i)


def _clean_rest(rest: str) -> str:
    """Pairs text of a step line without what can follow it on the same line."""
    if "\r" in rest:
        rest = rest.split("\r", 1)[0]
    if "[repeated " in rest:
        rest = re.sub(REPEATED_RE, "", rest)
    return rest.rstrip(" -")


def _parse_console(rests: list[str], where: list[tuple[int, int]], rows: StepRows) -> None:
    rest = pa.array([_clean_rest(r) for r in rests], pa.string())
    pairs = pc.split_pattern(rest, " - ")
    parent = pc.list_parent_indices(pairs).to_numpy()
    flat = pc.list_flatten(pairs)
    # an item without ":" becomes ":" so that every split has a key and a value (both empty: a failure)
    flat = pc.if_else(pc.match_substring(flat, ":"), flat, ":")
    kv = pc.split_pattern(flat, ":", max_splits=1, reverse=True)
    key = pc.list_element(kv, 0)
    val = pc.utf8_trim_whitespace(pc.list_element(kv, 1))
    is_np = pc.starts_with(val, "np.")
    n_np = pc.sum(is_np).as_py() or 0
    if n_np:
        inner = pc.replace_substring_regex(val.filter(is_np), NP_WRAPPED_RE, r"\1")
        val = pc.replace_with_mask(val, is_np, inner)
    is_num = pc.match_substring_regex(val, NUMBER_RE)
    is_bool = pc.is_in(val, pa.array(["True", "False"]))
    ok = pc.or_(is_num, is_bool)
    n_ok = pc.sum(ok).as_py() or 0
    rows.n_failures += len(flat) - n_ok
    rows.n_values += n_ok
    rows.n_console += n_ok
    if n_np:
        rows.n_np += pc.sum(pc.and_(is_np, ok)).as_py() or 0
    # the number format is a property of the run: a sample of values decides it
    sample = val.slice(0, 256)
    rows.n_v04_sampled += len(sample)
    rows.n_v04 += pc.sum(pc.match_substring_regex(sample, V04_RE)).as_py() or 0
    if n_ok == 0:
        return
    value = pc.cast(pc.if_else(is_num, val, "0"), pa.float64())
    if pc.any(is_bool).as_py():
        value = pc.if_else(is_bool, pc.if_else(pc.equal(val, "True"), 1.0, 0.0), value)
    starts = np.array([w[0] for w in where], dtype=np.int64)
    steps = np.array([w[1] for w in where], dtype=np.int64)
    table = pa.table(
        {
            "step": pa.array(steps[parent]),
            "key": key,
            "value": value,
            "source": pa.array(np.zeros(len(flat), dtype=np.int8)),
            "line_idx": pa.array(starts[parent]),
        }
    )
    rows.arrow.append(table if n_ok == len(flat) else table.filter(ok))


def _number(v) -> float | None:
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        return float(v)
    return None


def _parse_jsonl(line: str, start: int, rows: StepRows) -> None:
    try:
        obj = json.loads(line)
        step = int(obj["step"])
        data = obj["data"]
        items = data.items()
    except (ValueError, KeyError, TypeError, AttributeError):
        rows.n_failures += 1
        return
    for k, v in items:
        x = _number(v)
        if x is not None:
            rows.add(step, str(k), x, SRC_JSONL, start)
            rows.n_values += 1


def _parse_seed_kv(line: str, start: int, rows: StepRows) -> None:
    m = SEED_KV.search(line)
    step = int(m.group(1))
    rows.events.append((start, step))
    rows.n_step_lines += 1
    rows.n_seed += 1
    for item in m.group(2).split(","):
        k, _, v = item.strip().partition("=")
        try:
            rows.add(step, k, float(v), SRC_SEED_KV, start)
            rows.n_values += 1
        except ValueError:
            rows.n_failures += 1


def _parse_seed_timing(line: str, start: int, rows: StepRows) -> None:
    for name, ms in SEED_TIMING.findall(line):
        try:
            rows.add(-1, f"timing_s/{name}", float(ms) / 1000.0, SRC_SEED_TIMING, start)
            rows.n_values += 1
        except ValueError:
            rows.n_failures += 1


def parse_memory_lines(text: pa.StringArray, idx: np.ndarray, rows: StepRows) -> None:
    """GPU memory lines as `memory/*` rows of the step in progress (aggregated by max later).

    `<head>, memory allocated (GB): A, memory reserved (GB): R[, device memory used/total (GB): U/T]`
    """
    if len(idx) == 0:
        return
    parts = pc.split_pattern(text.take(pa.array(idx)), " (GB): ")
    n_parts = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    fields = [nth(pc.split_pattern(nth(parts, i), ",", max_splits=1), 0) for i in (1, 2)]
    device = pc.split_pattern(nth(parts, 3), "/", max_splits=1)
    fields += [nth(device, 0), nth(device, 1)]
    for field_, key in zip(fields, MEMORY_KEYS, strict=True):
        good = pc.fill_null(pc.match_substring_regex(field_, r"^\d+(?:\.\d*)?$"), False).to_numpy(
            zero_copy_only=False
        )
        sel = np.flatnonzero(good & (n_parts >= 3))
        if len(sel) == 0:
            continue
        rows.arrow.append(
            pa.table(
                {
                    "step": pa.array(np.full(len(sel), -1, dtype=np.int64)),
                    "key": pa.array(np.full(len(sel), key, dtype=object), pa.string()),
                    "value": pc.cast(field_.take(pa.array(sel)), pa.float64()),
                    "source": pa.array(np.full(len(sel), SRC_MEMORY, dtype=np.int8)),
                    "line_idx": pa.array(idx[sel].astype(np.int64)),
                }
            )
        )
