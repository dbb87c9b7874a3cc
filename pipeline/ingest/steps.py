"""Metric values from step lines: verl console lines (all number formats, hard-wrapped too), the JSONL
file logger, the seed-article formats and GPU memory lines.

Only the few lines of kind `step_metrics`/`memory` reach this module; pairs are split and parsed
with Arrow kernels. Rows whose step is -1 take the step in progress of their line later.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .lines import split_once, true_mask

# a step number has at most 18 digits (int64 holds them all): a longer one is no step head, and one that did not
# fit would fail the parse of its whole block
STEP_HEAD_RE = r"(?:^|\s)step:(?P<step>\d{1,18}) - "
STEP_HEAD = re.compile(STEP_HEAD_RE)
GLOBAL_STEP = re.compile(r"training/global_step:(?:np\.\w+\()?(\d{1,18})(?:\.0+)?\)?(?: |$)")
PREFIX = re.compile(r"^\([^)]*\) ?")
FRAGMENT = re.compile(r"^(?!\([^)]*\) )[ -]*\S+(?: - \S+)*[ -]*$")
SINGLE_TOKEN = re.compile(r"^[^\s(]\S*$")
REPEATED_RE = r"\s*\[repeated \d+x across cluster\].*$"
NP_HEAD_RE = r"^np\.[a-z]+\d*$"  # `np.float64` of `np.float64(x)`
NUMBER_RE = r"^[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)$"
NUMBER_CHARS = "0123456789.eE+-naif"  # the characters of NUMBER_RE
V04_RE = r"^-?\d+\.\d{3}$"
SEED_KV = re.compile(r"(?:^|\s)step=(\d{1,18})((?:,\s*[\w/@.-]+=[^,\s]+)+)")
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
class StepLineCounts:
    """What the step-line parsers count: step lines, lines that failed to parse, console lines and their
    number formats (np.float64(...), v0.4's sampled), seed key-value lines. A block's rows and a run's totals
    carry them; `add_counts` sums another's into these."""

    n_step_lines: int = 0
    n_failures: int = 0
    n_console: int = 0
    n_np: int = 0
    n_v04: int = 0
    n_v04_sampled: int = 0
    n_seed: int = 0

    def add_counts(self, other: StepLineCounts) -> None:
        """Add `other`'s counts to these."""
        for f in fields(StepLineCounts):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class StepRows(StepLineCounts):
    """Raw metric rows of one block, before reconciliation."""

    step: list = field(default_factory=list)
    key: list = field(default_factory=list)
    value: list = field(default_factory=list)
    source: list = field(default_factory=list)
    line_idx: list = field(default_factory=list)
    arrow: list = field(default_factory=list)  # vectorised parts: pa.Table with the same columns
    memory: list = field(default_factory=list)  # MemoryRows of the memory lines
    events: list = field(default_factory=list)  # (line_idx, step) of console/seed step lines
    tails: list = field(default_factory=list)  # last pieces of wrapped step lines not classified as such
    n_values: int = 0
    n_duplicate_keys: int = 0  # values of a key given again on the same step line
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


@dataclass
class MemoryRows:
    """Values of GPU memory lines, each key's rows in line order (their step is the step in progress)."""

    key: np.ndarray  # int8 codes into MEMORY_KEYS
    value: np.ndarray  # float64
    line_idx: np.ndarray  # int64, the line in the block


ROWS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("key", pa.string()),
        ("value", pa.float64()),
        ("source", pa.int8()),
        ("line_idx", pa.int64()),
    ]
)


Console = tuple[pa.StringArray, np.ndarray, np.ndarray]  # pairs text, first line, step of each step line


def parse_step_lines(text: pa.StringArray, idx: np.ndarray, rows: StepRows) -> None:
    """Parse the step-metric lines at positions `idx` of `text` (console, wrapped, JSONL, seed formats).

    Plain console step lines (the bulk) are parsed with Arrow kernels only; runs of adjacent lines
    that hold a line without a `step:N - ` head (wrapped pieces, JSONL, seed formats) go line by line.
    """
    if len(idx) == 0:
        return
    sub = text.take(pa.array(idx))
    fast = ~_runs_without_head(idx, true_mask(pc.match_substring_regex(sub, STEP_HEAD_RE)))
    parts: list[Console] = []
    if fast.any():
        parts.append(_console_heads(sub if fast.all() else sub.filter(pa.array(fast)), idx[fast], rows))
    if not fast.all():
        parts.append(_line_by_line(text, idx[~fast], sub.filter(pa.array(~fast)).to_pylist(), rows))
    rest = pa.concat_arrays([p[0] for p in parts])
    starts = np.concatenate([p[1] for p in parts])
    steps = np.concatenate([p[2] for p in parts])
    if len(parts) > 1:
        order = np.argsort(starts, kind="stable")
        rest, starts, steps = rest.take(pa.array(order)), starts[order], steps[order]
    if len(rest):
        _parse_console(_clean_rests(rest), starts, steps, rows)


def _runs_without_head(idx: np.ndarray, has_head: np.ndarray) -> np.ndarray:
    """The lines of the runs of adjacent step lines that hold a line without a `step:N - ` head."""
    run = np.concatenate([[0], np.cumsum(np.diff(idx) != 1)])
    return np.isin(run, run[~has_head])


def _console_heads(lines: pa.StringArray, starts: np.ndarray, rows: StepRows) -> Console:
    """Step and pairs text of lines that each hold a `step:N - ` head."""
    steps = pc.cast(pc.struct_field(pc.extract_regex(lines, STEP_HEAD_RE), [0]), pa.int64()).to_numpy()
    rest = pc.list_element(pc.split_pattern_regex(lines, STEP_HEAD.pattern, max_splits=1), 1)
    rows.events.extend(zip(starts.tolist(), steps.tolist(), strict=True))
    rows.n_step_lines += len(starts)
    return rest, starts, steps


def _line_by_line(text: pa.StringArray, idx: np.ndarray, lines: list[str], rows: StepRows) -> Console:
    """Wrapped step lines, `training/global_step` lines, JSONL and seed formats, one group at a time."""
    starts, steps, rests = [], [], []
    for start, joined in _wrap_groups(text, idx, lines, rows.tails):
        m = STEP_HEAD.search(joined) or GLOBAL_STEP.search(joined)
        if m:
            rows.events.append((start, int(m.group(1))))
            rows.n_step_lines += 1
            starts.append(start)
            steps.append(int(m.group(1)))
            rests.append(joined[m.end() :] if m.re is STEP_HEAD else joined)
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
    return pa.array(rests, pa.string()), np.array(starts, dtype=np.int64), np.array(steps, dtype=np.int64)


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


def _clean_rests(rest: pa.StringArray) -> pa.StringArray:
    """Pairs text of step lines without what can follow it on the same line (a tqdm `\\r`, a Ray
    ` [repeated Nx across cluster]`) nor trailing ` -`."""
    if pc.any(pc.match_substring_regex(rest, "\r")).as_py():
        rest = pc.replace_substring_regex(rest, "\r.*", "", max_replacements=1)
    if pc.any(pc.match_substring_regex(rest, r"\[repeated ")).as_py():
        rest = pc.replace_substring_regex(rest, REPEATED_RE, "", max_replacements=1)
    return pc.utf8_rtrim(rest, characters=" -")


def _parse_console(rest: pa.StringArray, starts: np.ndarray, steps: np.ndarray, rows: StepRows) -> None:
    """Split `key:value - key:value` pairs text into rows, with Arrow kernels and numpy only."""
    pairs = pc.split_pattern(rest, " - ")
    parent = pc.list_parent_indices(pairs).to_numpy()
    key, val, _ = split_once(pc.list_flatten(pairs), ":", last=True)
    n = len(key)
    # an item without ":" has no value (null): a failure
    val = pc.utf8_trim_whitespace(val)
    is_np = true_mask(pc.starts_with(val, "np."))
    if is_np.any():
        at = np.flatnonzero(is_np)
        inner, wrapped = _unwrap_np(val.take(pa.array(at)))
        unwrap = np.zeros(n, dtype=bool)
        unwrap[at[wrapped]] = True
        val = pc.replace_with_mask(val, pa.array(unwrap), inner.filter(pa.array(wrapped)))
    is_num, value = _numbers(val)
    is_bool = true_mask(pc.is_in(val, pa.array(["True", "False"])))
    ok = is_num | is_bool
    n_ok = int(ok.sum())
    rows.n_failures += n - n_ok
    rows.n_values += n_ok
    rows.n_console += n_ok
    rows.n_np += int((is_np & ok).sum())
    # the number format is a property of the run: a sample of values decides it
    sample = val.slice(0, 256)
    rows.n_v04_sampled += len(sample)
    rows.n_v04 += pc.sum(pc.match_substring_regex(sample, V04_RE)).as_py() or 0
    if n_ok == 0:
        return
    if is_bool.any():
        value = pc.if_else(pa.array(is_bool), pc.if_else(pc.equal(val, "True"), 1.0, 0.0), value)
    table = pa.table(
        {
            "step": pa.array(steps[parent]),
            "key": key,
            "value": value,
            "source": pa.array(np.zeros(n, dtype=np.int8)),
            "line_idx": pa.array(starts[parent]),
        }
    )
    table = table if n_ok == n else table.filter(pa.array(ok))
    counts = table.group_by(["line_idx", "key"]).aggregate([("value", "count")])
    if counts.num_rows < table.num_rows:  # a key given twice on one line: the reconcile keeps its last value
        rows.n_duplicate_keys += table.num_rows - counts.num_rows
        repeated = counts.filter(pc.greater(counts.column("value_count"), 1))
        for row in repeated.select(["line_idx", "key"]).to_pylist():
            rows.problems.append((row["line_idx"],
                                  f"metric key given twice on one step line: {row['key']} (the last value kept)"))
    rows.arrow.append(table)


def _unwrap_np(val: pa.StringArray) -> tuple[pa.StringArray, np.ndarray]:
    """`np.float64(x)` -> `x` (the `)` may be lost when a log is cut); and which values had that form.

    The form is `^np\\.[a-z]+\\d*\\(([^()]*)\\)?$` without a regex per value: the distinct heads are
    checked once. An `x` holding a bracket passes here but fails as a number just the same.
    """
    head, tail, bracket = split_once(val, "(", last=False)
    head = pc.dictionary_encode(head)
    head_ok = true_mask(pc.match_substring_regex(head.dictionary, NP_HEAD_RE))[head.indices.to_numpy()]
    tail = pc.fill_null(tail, "")
    inner = pc.utf8_rtrim(tail, ")")
    one_bracket = pc.subtract(pc.binary_length(tail), pc.binary_length(inner)).to_numpy() <= 1
    return inner, head_ok & one_bracket & bracket


def _numbers(val: pa.StringArray) -> tuple[np.ndarray, pa.Array]:
    """Which values are numbers (`NUMBER_RE`), and their float64 values (0 where not).

    Arrow's float parser accepts exactly the `NUMBER_RE` strings among those made of its characters,
    so a cheap character check and one cast do; a block where the cast refuses one falls back to the
    regex.
    """
    maybe = pc.and_(pc.equal(pc.ascii_trim(val, NUMBER_CHARS), ""), pc.greater(pc.binary_length(val), 0))
    try:
        value = pc.cast(pc.if_else(maybe, val, "0"), pa.float64())
        return true_mask(maybe), value
    except pa.ArrowInvalid:
        is_num = pc.match_substring_regex(val, NUMBER_RE)
        return true_mask(is_num), pc.cast(pc.if_else(is_num, val, "0"), pa.float64())


def _number(v) -> float | None:
    if v is None:
        return math.nan
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        try:
            return float(v)
        except OverflowError:  # an integer past 1.8e308
            return None
    return None


def _parse_jsonl(line: str, start: int, rows: StepRows) -> None:
    try:
        obj = json.loads(line)
        step = int(obj["step"])
        if not -(2**63) <= step < 2**63:
            raise ValueError(f"step {step} out of range")
        data = obj["data"]
        items = data.items()
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
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
    """GPU memory lines as `memory/*` values of the step in progress, into `rows.memory` (aggregated by
    max later).

    `<head>, memory allocated (GB): A, memory reserved (GB): R[, device memory used/total (GB): U/T]`
    """
    if len(idx) == 0:
        return
    parts = pc.split_pattern(text.take(pa.array(idx)), " (GB): ")
    n_parts = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    fields = [split_once(_nth(parts, i), ",", last=False)[0] for i in (1, 2)]
    used, total, _ = split_once(_nth(parts, 3), "/", last=False)
    fields += [used, total]
    value = pa.concat_arrays(fields)
    good = true_mask(pc.match_substring_regex(value, r"^\d+(?:\.\d*)?$")) & np.tile(n_parts >= 3, len(fields))
    sel = np.flatnonzero(good)
    if len(sel) == 0:
        return
    rows.memory.append(
        MemoryRows(
            key=np.repeat(np.arange(len(fields), dtype=np.int8), len(idx))[sel],
            value=pc.cast(value.take(pa.array(sel)), pa.float64()).to_numpy(),
            line_idx=np.tile(idx.astype(np.int64), len(fields))[sel],
        )
    )


def _nth(lists: pa.Array, i: int) -> pa.Array:
    """Element i of each list, null where a list is shorter (or null)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    pos = np.where(lengths > i, np.cumsum(lengths) - lengths + i, -1)
    return pc.list_flatten(lists).take(pa.array(pos, mask=pos < 0))
