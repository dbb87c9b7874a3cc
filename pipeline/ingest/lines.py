"""Vectorised line handling: byte blocks -> Arrow string arrays -> per-line kind, prefix, phase, timestamp.

A line is the bytes between two `\\n` (lines are split on `\\n` only: a `\\r` written by tqdm stays
inside the line; the `\\r` of a CRLF ending is removed with the ending). The last line of a file
counts even without a final `\\n`; an empty file has no lines. Numbering is 1-based per file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .linescan import line_matches
from .readers import IngestLimits

ANSI_RE = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]"  # what `_strip_ansi` removes
ANSI_REMNANT_RE = r"(?:\^\[|\\u001b|\\x1b|\\033)?\[[0-9;]{1,12}m"
COLOUR_END = re.compile(rb"\[0m")  # what a block with `ANSI_REMNANT_RE` remnants holds
_CSI_PARAM = np.zeros(256, dtype=bool)
_CSI_PARAM[np.frombuffer(b"0123456789;?", np.uint8)] = True
_CSI_INTERMEDIATE = np.zeros(256, dtype=bool)
_CSI_INTERMEDIATE[0x20:0x30] = True
_ALNUM = np.zeros(256, dtype=bool)
_ALNUM[np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", np.uint8)] = True
OPT_PREFIX = r"^(?:\([^)]*\) ?)?"
# a container runtime's stamp before every line (`kubectl logs --timestamps`, `docker logs -t`: RFC 3339)
CONTAINER_STAMP_RE = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) "
STAMP_SAMPLE_LINES = 64  # a block whose first lines carry no container stamp carries none
PREFIX_RE = r"^\((?:(?P<comp>[^\s()=,]+) )?(?:pid=(?P<pid>\d+)|(?P<raylet>raylet))(?:, ip=[^)]*)?\)"
TS_RE = OPT_PREFIX + r"(?:[A-Z]+:|\[)?(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"
# the clocks without a year: vLLM's and SGLang's loggers (`INFO 03-10 22:48:08`) and glog (`I0718 22:40:56.409826`);
# a run's lines get the year of its dated stamps (ingest.run), or stay without a time
YEARLESS_TS_RE = (OPT_PREFIX + r"(?P<md>(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d|[IWEF]\d{4}) "
                  r"(?P<clock>\d\d:\d\d:\d\d)(?:[.,]\d{1,6})?\s")
# the placeholder year of a year-less clock until its run's year is known: a leap year, so 02-29 parses
CLOCK_YEAR = 2000

STEP_LINE_RE = r"(?:^|\s)step:\d+ - "
JSONL_RE = OPT_PREFIX + r'\{"step":\s*-?\d+'
SEED_KV_RE = r"(?:^|\s)step=\d+,\s*[\w/@.-]+="
SEED_TIMING_RE = r"\[INFO\] step: [\w/.@-]+: [-+\d.eE]+ ?ms"
# a piece of a hard-wrapped step line (RE2 has no look-ahead: a piece may not start like a Ray prefix)
FRAGMENT_RE = r"^(?: ?- ?|\()?[^\s(]\S* - [\w/@.\-]+:\S+(?: - |$)|^ ?- [\w/@.\-]+:\S+"
STEP_ANY_RE = "|".join([STEP_LINE_RE, JSONL_RE, SEED_KV_RE, SEED_TIMING_RE, FRAGMENT_RE])
# cheap prefilters whose union holds every STEP_ANY_RE match: a literal-led search and anchored patterns
STEP_HINT_RE = r"step[:=]"
STEP_ANCHORED_RE = JSONL_RE + "|" + FRAGMENT_RE
MEMORY_RE = r"memory allocated \(GB\): "
CONFIG_OPEN_RE = OPT_PREFIX + r"\{'actor_rollout_ref': "
RESUME_RE = (
    OPT_PREFIX
    + r"(?:Training from scratch|Found checkpoint|Load from checkpoint folder|Setting global step to"
    r"|Resuming from)"
)
CONFIG_RE = (
    OPT_PREFIX + r"(?:\{'actor_rollout_ref': |Total training steps: \d+|TaskRunner hostname:|ray init kwargs:"
    r"|Size of train dataloader|Using dataset class|(?:filter )?dataset len:|\[validate_config\]"
    r"|Training from scratch|Found checkpoint|Load from checkpoint folder|Setting global step to|Resuming from)"
    r"|Started a local Ray instance"
)
TRACE_FILE_RE = OPT_PREFIX + r'\s+File ".*", line \d+'
ERROR_STRONG_RE = (
    OPT_PREFIX + r"(?:Traceback \(most recent call last\)|\s+File \".*\", line \d+|\s*\^+\s*$"
    r"|[\w.]*(?:Error|Exception|Exit|Interrupt)\b(?:\(\w+\))?(?::|$)|.*Error executing job)"
    r"|\b(?:ERROR|CRITICAL|FATAL)\b|\[E\d{3,4} \d|\]:\[E\d|A worker died or was killed|SIGSEGV|Segmentation fault"
    r"|\[\d{4}-\d\d-\d\d [\d:,.]+ E \d+ \d+\]|(?:^|\s)E\d{4} \d\d:\d\d:\d\d"
)
WARNING_RE = r"\bWARN(?:ING)?\b|[A-Za-z]Warning\b|\[W\d{3,4} \d|\[\d{4}-\d\d-\d\d [\d:,.]+ W \d+ \d+\]"
ERROR_WEAK_RE = r"Error|Exception"
PROGRESS_RE = r"\d+%\||\| *\d+/\d+ \[|it/s\]|s/it\]|Training Progress"
PHASE_RE = (
    r"(?P<method>generate_sequences|compute_ref_log_prob|compute_log_prob|compute_values|update_critic"
    r"|update_actor|update_policy|update_weights|save_checkpoint|_validate\b|validation|testing"
    r"|compute_rm_score|compute_reward|reward_fn)"
)
PHASES = {
    "generate_sequences": "gen",
    "compute_ref_log_prob": "ref",
    "compute_log_prob": "old_log_prob",
    "compute_values": "values",
    "update_critic": "update_critic",
    "update_actor": "update_actor",
    "update_policy": "update_actor",
    "update_weights": "update_weights",
    "save_checkpoint": "save_checkpoint",
    "_validate": "testing",
    "validation": "testing",
    "testing": "testing",
    "compute_rm_score": "reward",
    "compute_reward": "reward",
    "reward_fn": "reward",
}
# what `classify` asks Hyperscan for, in the order `_kinds_scanned` unpacks them
SCAN_PATTERNS = (
    STEP_ANY_RE, MEMORY_RE, CONFIG_RE, ERROR_STRONG_RE, WARNING_RE, ERROR_WEAK_RE, PROGRESS_RE, TRACE_FILE_RE,
    CONFIG_OPEN_RE, RESUME_RE, PHASE_RE, f"{TS_RE}|{YEARLESS_TS_RE}",
)
KINDS = ("other", "step_metrics", "error", "warning", "config", "progress", "memory")
K_OTHER, K_STEP, K_ERROR, K_WARNING, K_CONFIG, K_PROGRESS, K_MEMORY = range(7)


@dataclass
class Lines:
    """One block of decoded lines of one file."""

    text: pa.StringArray
    n_undecodable: int
    n_truncated: int = 0
    crlf: bool = False  # some line ended with `\\r\\n`
    joined: pa.Buffer | None = None  # the lines, each followed by `\\n` (None when a line was changed)


def iter_raw_blocks(
    chunks: Iterator[bytes], name: str, limits: IngestLimits, problems: list[str]
) -> Iterator[bytes]:
    """Regroup byte chunks into blocks of whole lines, each ending with `\\n` (one copy per block).

    A line longer than `limits.max_line_bytes` is kept truncated to that size (one problem per file).
    """
    carry: list[bytes] = []  # the pieces of the last, unfinished line
    skipping = False
    n_long = 0
    for parts in _regroup(chunks, limits.block_bytes):
        if skipping:
            parts = _after_first_newline(parts)
            if not parts:
                continue
            skipping = False
        last = _last_newline(parts)
        if last is None:
            carry += parts
        else:
            j, cut = last
            yield b"".join([*carry, *parts[:j], parts[j][: cut + 1]])
            carry = [parts[j][cut + 1 :], *parts[j + 1 :]]
        if sum(map(len, carry)) > limits.max_line_bytes:
            n_long += 1
            yield b"".join(carry)[: limits.max_line_bytes] + b"\n"
            carry = []
            skipping = True
    if any(carry):
        yield b"".join([*carry, b"\n"])
    if n_long:
        problems.append(
            f"{name}: {n_long} line(s) longer than {limits.max_line_bytes} bytes kept truncated to that size"
        )


def _last_newline(parts: list[bytes]) -> tuple[int, int] | None:
    """(part, offset) of the last `\\n` in `parts`, or None."""
    for j in range(len(parts) - 1, -1, -1):
        cut = parts[j].rfind(b"\n")
        if cut >= 0:
            return j, cut
    return None


def _after_first_newline(parts: list[bytes]) -> list[bytes]:
    """What follows the first `\\n` in `parts` (empty if there is none)."""
    for i, part in enumerate(parts):
        cut = part.find(b"\n")
        if cut >= 0:
            return [part[cut + 1 :], *parts[i + 1 :]]
    return []


def _regroup(chunks: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    """Group small reads into lists of about `size` bytes."""
    parts, total = [], 0
    for chunk in chunks:
        parts.append(chunk)
        total += len(chunk)
        if total >= size:
            yield parts
            parts, total = [], 0
    if parts:
        yield parts


def _big(raw: bytes | pa.Buffer) -> pa.Array:
    """The whole block as one large_binary value, zero-copy."""
    buf = raw if isinstance(raw, pa.Buffer) else pa.py_buffer(raw)
    offsets = pa.py_buffer(np.array([0, buf.size], dtype=np.int64))
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, buf])


def _split_lines(big: pa.Array) -> pa.Array:
    """The `\\n`-terminated lines of a one-value block, without their `\\n` (a trailing piece is dropped)."""
    pieces = pc.list_flatten(pc.split_pattern(big, "\n"))
    return pieces.slice(0, len(pieces) - 1)


def _strip_ansi(raw: bytes) -> pa.Buffer:
    """`raw` without the `ANSI_RE` escape sequences, found with numpy (one regex replacement over a
    whole block is slow). No sequence holds a second ESC nor a newline, so each ESC is looked at alone."""
    arr = np.frombuffer(raw, dtype=np.uint8)
    esc = np.flatnonzero(arr == 0x1B)
    padded = np.concatenate([arr, np.zeros(1, dtype=np.uint8)])  # reading past the end gives 0

    def byte(pos: np.ndarray) -> np.ndarray:
        return padded[np.minimum(pos, len(arr))]

    second, third = byte(esc + 1), byte(esc + 2)
    length = np.zeros(len(esc), dtype=np.int64)  # of the sequence at each ESC, 0 if none
    length[(second == ord("=")) | (second == ord(">"))] = 2
    length[((second == ord("(")) | (second == ord(")"))) & _ALNUM[third]] = 3
    csi = np.flatnonzero(second == ord("["))
    end = esc[csi] + 2
    for allowed in (_CSI_PARAM, _CSI_INTERMEDIATE):
        active = np.arange(len(csi))
        while len(active):
            active = active[allowed[byte(end[active])]]
            end[active] += 1
    final = byte(end)
    ok = (final >= 0x40) & (final <= 0x7E)
    length[csi[ok]] = end[ok] + 1 - esc[csi[ok]]
    found = length > 0
    starts, lengths = esc[found], length[found]
    # the block as pieces alternately kept and dropped (zero-copy); one `take` of the kept pieces
    # gathers them into one buffer
    bounds = np.empty(2 * len(starts) + 2, dtype=np.int64)
    bounds[0], bounds[-1] = 0, len(arr)
    bounds[1:-1:2], bounds[2:-1:2] = starts, starts + lengths
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(raw)]
    pieces = pa.Array.from_buffers(pa.large_binary(), len(bounds) - 1, buffers)
    kept = pieces.take(pa.array(np.arange(0, len(bounds) - 1, 2)))
    return kept.buffers()[2].slice(0, len(arr) - int(lengths.sum()))


def _has_crlf(raw: bytes) -> bool:
    """Whether `raw` holds a `\\r\\n` (a two-byte `in` costs more than numpy on the `\\r`s of tqdm)."""
    if b"\r" not in raw:
        return False
    arr = np.frombuffer(raw, dtype=np.uint8)
    return bool((arr[np.flatnonzero(arr[:-1] == 13) + 1] == 10).any())


def decode_block(raw: bytes, max_line_bytes: int = 2**62) -> Lines:
    """Decode a block of whole lines into an Arrow string array: ANSI escapes and line endings removed.

    Invalid UTF-8 is replaced by U+FFFD, and the lines that needed it are counted. Lines longer than
    `max_line_bytes` are cut to that size. The work runs in Arrow kernels (the GIL is released).
    """
    crlf = _has_crlf(raw)
    stripped = _strip_ansi(raw) if b"\x1b" in raw else raw
    big = _big(stripped)
    if b"[0m" in raw and COLOUR_END.search(memoryview(stripped)):  # Python's `re` reads the buffer in place
        # colour codes whose ESC a web page or an editor dropped (`[36m(TaskRunner pid=1)[0m`, `^[[36m`)
        big = pc.replace_substring_regex(big, ANSI_REMNANT_RE, b"")
    if crlf:
        big = pc.replace_substring(big, b"\r\n", b"\n")
    lines = _split_lines(big)
    n_long = 0
    if len(lines):
        lengths = pc.binary_length(lines)
        if pc.max(lengths).as_py() > max_line_bytes:
            n_long = pc.sum(pc.greater(lengths, max_line_bytes)).as_py()
            lines = pc.binary_slice(lines, 0, max_line_bytes)
    try:
        text = pc.cast(lines, pa.string())
    except pa.ArrowInvalid:
        text, n_bad = _decode_replacing(lines)
        return Lines(text, n_bad, n_long, crlf)
    return Lines(text, 0, n_long, crlf, None if n_long else _whole_lines(big))


def _whole_lines(big: pa.Array) -> pa.Buffer | None:
    """The bytes of a one-value block if they end with `\\n` (so they hold exactly its split lines)."""
    start, end = np.frombuffer(big.buffers()[1], dtype=np.int64)[big.offset : big.offset + 2]
    data = big.buffers()[2]
    if end == start or data[end - 1] != ord("\n"):
        return None
    return data.slice(start, end - start)


def _decode_replacing(lines: pa.Array) -> tuple[pa.StringArray, int]:
    """Lines holding invalid UTF-8 decoded with U+FFFD, and how many lines gained one."""
    had = true_mask(pc.match_substring(lines, "\ufffd".encode()))
    text = pa.array([b.decode("utf-8", "replace") for b in lines.to_pylist()], pa.string())
    now = true_mask(pc.match_substring(text, "\ufffd"))
    return text, max(1, int((now & ~had).sum()))


@dataclass
class Classified:
    """Per-line columns computed from the text alone (no cross-line state)."""

    kind: np.ndarray  # int8 codes into KINDS
    component: pa.Array
    pid: pa.Array
    phase_hint: pa.Array
    ts: pa.Array
    config_open: np.ndarray  # bool: first line of a config pprint
    resume_marker: np.ndarray  # bool: a start-up line that can open a resumed segment
    clock: pa.Array  # a year-less stamp in the year CLOCK_YEAR, where the line has one and no dated stamp


def unclassified(n: int) -> Classified:
    """Columns for lines that could not be classified: all `other`."""
    none = pa.nulls(n, pa.string())
    flags = np.zeros(n, dtype=bool)
    return Classified(
        np.zeros(n, dtype=np.int8),
        none,
        pa.nulls(n, pa.int64()),
        none,
        pa.nulls(n, pa.timestamp("us")),
        flags,
        flags,
        pa.nulls(n, pa.timestamp("us")),
    )


def true_mask(arr: pa.Array) -> np.ndarray:
    """A boolean Arrow array as a NumPy mask, null as False."""
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False)


def _scatter(n: int, idx: np.ndarray, values: pa.Array, type_: pa.DataType) -> pa.Array:
    """A length-n array, null except `values` at positions `idx`."""
    if len(idx) == 0:
        return pa.nulls(n, type_)
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx))
    return values.take(pa.array(pos, mask=pos < 0))


def without_container_stamps(text: pa.StringArray) -> pa.StringArray:
    """The lines without a container runtime's stamp in front (the same array when its first lines have none):
    what the program itself printed, Ray prefix first, for every pattern anchored at a line's start."""
    sample = text.slice(0, STAMP_SAMPLE_LINES)
    if not pc.any(pc.match_substring_regex(sample, CONTAINER_STAMP_RE)).as_py():
        return text
    return pc.replace_substring_regex(text, CONTAINER_STAMP_RE, "")


def classify(text: pa.StringArray, joined: pa.Buffer | None = None) -> Classified:
    """Kind, Ray prefix, phase hint and timestamp of every line (`joined`: the lines each followed by `\\n`).

    With Hyperscan every kind pattern is matched in one pass over the block (`linescan`); without it,
    step lines are found with cheap prefilters first, the other patterns only look at the rest, and the
    non-memory lines are deduplicated first (warnings and other chatter repeat a lot).
    """
    hits = line_matches(text, SCAN_PATTERNS, joined)
    kind, config_open, resume_marker, phase_names = (
        _kinds_scanned(text, hits) if hits is not None else _kinds_by_arrow(text)
    )
    component, pid = _prefix(text)
    if hits is None:
        ts, clock = line_times(text), _clocks(text)
    else:  # few lines carry a timestamp (0.5% of the real logs'): parsed where Hyperscan found one
        stamped = np.flatnonzero(hits[-1])
        some = text.take(pa.array(stamped))
        ts = _scatter(len(text), stamped, line_times(some), pa.timestamp("us"))
        clock = _scatter(len(text), stamped, _clocks(some), pa.timestamp("us"))
    clock = pc.if_else(pc.is_null(ts), clock, pa.scalar(None, pa.timestamp("us")))
    return Classified(kind, component, pid, phase_names, ts, config_open, resume_marker, clock)


def _kinds_scanned(text: pa.StringArray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array]:
    """Kinds, config and resume flags and phases from the per-line matches of `SCAN_PATTERNS`."""
    n = len(text)
    kind = np.zeros(n, dtype=np.int8)
    step, memory, config, error, warning, error_weak, progress, trace, config_opens, resumes, phase, _ = hits
    kind[step] = K_STEP
    kind[memory & ~step] = K_MEMORY
    rest = kind == K_OTHER
    for mask, code in ((progress, K_PROGRESS), (error_weak, K_ERROR), (warning, K_WARNING),
                       (error, K_ERROR), (config, K_CONFIG)):  # the first pattern of the order wins: set last
        kind[rest & mask] = code
    is_config = kind == K_CONFIG
    _mark_trace_code_lines(text, kind, np.flatnonzero(rest & trace))
    named = np.flatnonzero(phase & ~step)
    return kind, is_config & config_opens, is_config & resumes, _scatter(
        n, named, _phase(text.take(pa.array(named))), pa.string()
    )


def _kinds_by_arrow(text: pa.StringArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array]:
    """Kinds, config and resume flags and phases with Arrow's RE2 kernels, one pattern at a time."""
    n = len(text)
    kind = np.zeros(n, dtype=np.int8)
    config_open = np.zeros(n, dtype=bool)
    resume_marker = np.zeros(n, dtype=bool)
    kind[_step_lines(text)] = K_STEP
    kind[true_mask(pc.match_substring_regex(text, MEMORY_RE)) & (kind == K_OTHER)] = K_MEMORY
    memory_at, other_at = np.flatnonzero(kind == K_MEMORY), np.flatnonzero(kind == K_OTHER)
    phase_names = pa.nulls(n, pa.string())
    if len(other_at):
        other = text.take(pa.array(other_at)) if len(other_at) < n else text
        encoded = pc.dictionary_encode(other)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        found = _distinct_kinds(encoded.dictionary)
        kind[other_at] = found.kind[codes]
        config_open[other_at] = found.config_open[codes]
        resume_marker[other_at] = found.resume_marker[codes]
        _mark_trace_code_lines(text, kind, other_at[found.trace[codes]])
        phase_names = _scatter(n, other_at, found.phase.take(encoded.indices), pa.string())
    if len(memory_at):
        memory_phase = _phase(text.take(pa.array(memory_at)))
        phase_names = pc.coalesce(phase_names, _scatter(n, memory_at, memory_phase, pa.string()))
    return kind, config_open, resume_marker, phase_names


def _step_lines(text: pa.StringArray) -> np.ndarray:
    """Positions of the lines that carry step metrics (any format, wrapped pieces too)."""
    maybe = true_mask(pc.match_substring_regex(text, STEP_HINT_RE))
    maybe |= true_mask(pc.match_substring_regex(text, STEP_ANCHORED_RE))
    cand = np.flatnonzero(maybe)
    if len(cand) == 0:
        return cand
    return cand[true_mask(pc.match_substring_regex(text.take(pa.array(cand)), STEP_ANY_RE))]


@dataclass
class _DistinctKinds:
    """Classification of distinct non-step, non-memory lines."""

    kind: np.ndarray
    config_open: np.ndarray
    resume_marker: np.ndarray
    trace: np.ndarray  # bool: a traceback `File "...", line N` line
    phase: pa.Array


def _distinct_kinds(lines: pa.StringArray) -> _DistinctKinds:
    """Kind of each line: the first of config, error, warning, weak error, progress that matches."""
    m = len(lines)
    kind = np.full(m, K_OTHER, dtype=np.int8)
    todo = np.arange(m)
    config = np.zeros(m, dtype=bool)
    for pattern, code in (
        (CONFIG_RE, K_CONFIG),
        (ERROR_STRONG_RE, K_ERROR),
        (WARNING_RE, K_WARNING),
        (ERROR_WEAK_RE, K_ERROR),
        (PROGRESS_RE, K_PROGRESS),
    ):
        if len(todo) == 0:
            break
        sub = lines if len(todo) == m else lines.take(pa.array(todo))
        hit = true_mask(pc.match_substring_regex(sub, pattern))
        kind[todo[hit]] = code
        if code == K_CONFIG:
            config[todo[hit]] = True
        todo = todo[~hit]
    config_open = np.zeros(m, dtype=bool)
    resume_marker = np.zeros(m, dtype=bool)
    opened = np.flatnonzero(config)
    if len(opened):
        opened_text = lines.take(pa.array(opened))
        config_open[opened[true_mask(pc.match_substring_regex(opened_text, CONFIG_OPEN_RE))]] = True
        resume_marker[opened[true_mask(pc.match_substring_regex(opened_text, RESUME_RE))]] = True
    trace = true_mask(pc.match_substring_regex(lines, TRACE_FILE_RE))
    return _DistinctKinds(kind, config_open, resume_marker, trace, _phase(lines))


def _phase(lines: pa.StringArray) -> pa.Array:
    """The verl phase named by each line's first method name, or null."""
    names = pc.struct_field(pc.extract_regex(lines, PHASE_RE), [0])
    return pc.take(pa.array(list(PHASES.values())), pc.index_in(names, pa.array(list(PHASES))))


def _mark_trace_code_lines(text: pa.StringArray, kind: np.ndarray, file_lines: np.ndarray) -> None:
    """The source line printed under a traceback's `File "...", line N` belongs to the error."""
    nxt = file_lines + 1
    nxt = nxt[nxt < len(kind)]
    nxt = nxt[kind[nxt] == K_OTHER]
    if len(nxt):
        indented = true_mask(pc.match_substring_regex(text.take(pa.array(nxt)), OPT_PREFIX + r"\s{2,}\S"))
        kind[nxt[indented]] = K_ERROR


def split_once(
    items: pa.StringArray, sep: str, last: bool = False
) -> tuple[pa.StringArray, pa.StringArray, np.ndarray]:
    """Items cut at their first (or last) `sep`, an ASCII character: (before, after, found).

    Where `sep` is absent, before is the whole item and after is null; a null item gives nulls. The same
    as Arrow's `split_pattern(max_splits=1)` then elements 0 and 1, but the last cut is found with numpy
    in the data buffer, the first by Arrow's search, and each half is one `take` of zero-copy slices of
    the buffer: Arrow's split with `max_splits` and `list_element` cost ten times as much.
    """
    valid = true_mask(pc.is_valid(items)) if items.null_count else np.ones(len(items), dtype=bool)
    if not valid.all():
        items = pc.fill_null(items, "")
    offsets = np.frombuffer(items.buffers()[1], dtype=np.int32)[items.offset : items.offset + len(items) + 1]
    begin, end = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    lo = int(offsets[0])
    if last:
        data = np.frombuffer(items.buffers()[2], dtype=np.uint8)
        hits = np.flatnonzero(data[lo : offsets[-1]] == ord(sep)) + lo
        k = np.searchsorted(hits, end, side="left") - 1
        cut = hits[np.maximum(k, 0)] if len(hits) else end
        found = (k >= 0) & (cut >= begin)
    else:  # Arrow's search stops at the first hit: cheaper than scanning every byte
        at = pc.find_substring(items, sep).to_numpy(zero_copy_only=False)
        found = at >= 0
        cut = begin + at
    cut = np.where(found, cut, end)
    # each item becomes four pieces: before [begin, cut), the separator, after [cut + found, end), and
    # the gap up to the next item's begin (none)
    m = len(items)
    pieces = np.empty(4 * m + 1, dtype=np.int32)
    pieces[0:-1:4], pieces[1::4], pieces[2::4], pieces[3::4] = begin, cut, cut + found, end
    pieces[-1] = end[-1] if m else lo
    parts = pa.Array.from_buffers(pa.string(), 4 * m, [None, pa.py_buffer(pieces), items.buffers()[2]])
    fourth = np.arange(m, dtype=np.int64) * 4
    found &= valid
    before = parts.take(pa.array(fourth, mask=None if valid.all() else ~valid))
    return before, parts.take(pa.array(fourth + 2, mask=~found)), found


def _prefix(text: pa.StringArray) -> tuple[pa.Array, pa.Array]:
    """Component and pid of the Ray prefix; parsed once per distinct `(...)` head (a run has few)."""
    n = len(text)
    starts = true_mask(pc.starts_with(text, "("))
    opened = np.flatnonzero(starts)
    # a copy of the opened lines is searched faster than the block: the others would be read to their end
    heads, _, closed = split_once(text if len(opened) == n else text.filter(pa.array(starts)), ")")
    has = opened[closed]
    if len(has) == 0:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    distinct = pc.dictionary_encode(heads.filter(pa.array(closed)))
    # null where the head is no Ray prefix
    ex = pc.extract_regex(pc.binary_join_element_wise(distinct.dictionary, ")", ""), PREFIX_RE)
    comp, pid_s, raylet = (pc.struct_field(ex, [i]) for i in range(3))
    pid_s = pc.if_else(pc.equal(pid_s, ""), None, pid_s)
    comp = pc.if_else(pc.equal(comp, ""), pc.if_else(pc.is_null(pid_s), None, "pid"), comp)
    comp = pc.if_else(pc.equal(raylet, "raylet"), "raylet", comp)
    pos = np.full(n, -1, dtype=np.int64)
    pos[has] = distinct.indices.to_numpy()
    at = pa.array(pos, mask=pos < 0)
    return comp.take(at), pc.cast(pid_s, pa.int64()).take(at)


def dated_clocks(ts: pa.Array, clock: pa.Array, before: datetime | None) -> pa.Array:
    """`ts` with each line's year-less `clock` dated where it has none: in the year of the latest dated stamp at
    or before the line (`before`: the latest of the lines read earlier), the nearer one across a new year;
    null before any dated stamp (the year is unknown)."""
    if clock.null_count == len(clock):
        return ts
    dated = ts.to_numpy(zero_copy_only=False).astype("datetime64[us]")
    stamped = np.where(np.isnat(dated), -1, np.arange(len(dated)))
    latest = np.maximum.accumulate(stamped)
    ref = np.where(latest >= 0, dated[np.maximum(latest, 0)], np.datetime64(before or "NaT", "us"))
    yearless = clock.to_numpy(zero_copy_only=False).astype("datetime64[us]")
    month = yearless.astype("datetime64[M]") - yearless.astype("datetime64[Y]")
    into_month = yearless - yearless.astype("datetime64[M]")
    year = ref.astype("datetime64[Y]")

    def in_year(y: np.ndarray) -> np.ndarray:
        return y.astype("datetime64[M]") + month + into_month

    guess = in_year(year)
    half_year = np.timedelta64(183, "D")
    guess = np.where(guess < ref - half_year, in_year(year + 1),
                     np.where(guess > ref + half_year, in_year(year - 1), guess))
    return pa.array(np.where(np.isnat(dated), guess, dated), pa.timestamp("us"), from_pandas=True)


def _clocks(text: pa.StringArray) -> pa.Array:
    """The year-less clock at the start of each line (after a Ray prefix) in the year CLOCK_YEAR, or null."""
    found = pc.extract_regex(text, YEARLESS_TS_RE)
    if found.null_count == len(found):
        return pa.nulls(len(text), pa.timestamp("us"))
    month_day = pc.utf8_slice_codeunits(pc.replace_substring_regex(pc.struct_field(found, [0]), r"\D", ""), -4)
    stamp = pc.binary_join_element_wise(str(CLOCK_YEAR), month_day, " ", pc.struct_field(found, [1]), "")
    return pc.strptime(stamp, "%Y%m%d %H:%M:%S", "us", error_is_null=True)


def line_times(text: pa.StringArray) -> pa.Array:
    """The timestamp near the start of each line (after a Ray prefix and a level), or null."""
    raw = pc.struct_field(pc.extract_regex(text, TS_RE), [0])
    if raw.null_count == len(raw):
        return pa.nulls(len(text), pa.timestamp("us"))
    raw = pc.replace_substring(pc.replace_substring(raw, ",", "."), "T", " ")
    try:
        return pc.cast(raw, pa.timestamp("us"))
    except pa.ArrowInvalid:
        return pc.strptime(pc.utf8_slice_codeunits(raw, 0, 19), "%Y-%m-%d %H:%M:%S", "us", error_is_null=True)
