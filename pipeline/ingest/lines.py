"""Vectorised line handling: byte blocks -> Arrow string arrays -> per-line kind, prefix, phase, timestamp.

A line is the bytes between two `\\n` (lines are split on `\\n` only: a `\\r` written by tqdm stays
inside the line; the `\\r` of a CRLF ending is removed with the ending). The last line of a file
counts even without a final `\\n`; an empty file has no lines. Numbering is 1-based per file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .readers import IngestLimits

ANSI_RE = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]"
OPT_PREFIX = r"^(?:\([^)]*\) ?)?"
PREFIX_RE = r"^\((?:(?P<comp>[^\s()=,]+) )?(?:pid=(?P<pid>\d+)|(?P<raylet>raylet))(?:, ip=[^)]*)?\)"
TS_RE = OPT_PREFIX + r"(?:[A-Z]+:|\[)?(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"

STEP_LINE_RE = r"(?:^|\s)step:\d+ - "
JSONL_RE = OPT_PREFIX + r'\{"step":\s*-?\d+'
SEED_KV_RE = r"(?:^|\s)step=\d+,\s*[\w/@.-]+="
SEED_TIMING_RE = r"\[INFO\] step: [\w/.@-]+: [-+\d.eE]+ ?ms"
# a piece of a hard-wrapped step line (RE2 has no look-ahead: a piece may not start like a Ray prefix)
FRAGMENT_RE = r"^(?: ?- ?|\()?[^\s(]\S* - [\w/@.\-]+:\S+(?: - |$)|^ ?- [\w/@.\-]+:\S+"
STEP_ANY_RE = "|".join([STEP_LINE_RE, JSONL_RE, SEED_KV_RE, SEED_TIMING_RE, FRAGMENT_RE])
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
    r"|update_actor|update_policy|update_weights|save_checkpoint|_validate|validation|testing"
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
KINDS = ("other", "step_metrics", "error", "warning", "config", "progress", "memory")
K_OTHER, K_STEP, K_ERROR, K_WARNING, K_CONFIG, K_PROGRESS, K_MEMORY = range(7)
CANDIDATE_RE = "|".join(
    [STEP_ANY_RE, MEMORY_RE, CONFIG_RE, ERROR_STRONG_RE, WARNING_RE, ERROR_WEAK_RE, PROGRESS_RE, PHASE_RE]
)


@dataclass
class Lines:
    """One block of decoded lines of one file."""

    text: pa.StringArray
    n_undecodable: int
    n_truncated: int = 0


def iter_raw_blocks(
    chunks: Iterator[bytes], name: str, limits: IngestLimits, problems: list[str]
) -> Iterator[bytes]:
    """Regroup byte chunks into blocks of whole lines, each ending with `\\n`.

    A line longer than `limits.max_line_bytes` is kept truncated to that size (one problem per file).
    """
    carry = b""
    skipping = False
    n_long = 0
    for chunk in _regroup(chunks, limits.block_bytes):
        if skipping:
            cut = chunk.find(b"\n")
            if cut < 0:
                continue
            chunk = chunk[cut + 1 :]
            skipping = False
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n")
        if cut >= 0:
            if cut + 1 < len(buf):
                carry = buf[cut + 1 :]
                buf = buf[: cut + 1]
            else:
                carry = b""
            yield buf
        else:
            carry = buf
        if len(carry) > limits.max_line_bytes:
            n_long += 1
            yield carry[: limits.max_line_bytes] + b"\n"
            carry = b""
            skipping = True
    if carry:
        yield carry + b"\n"
    if n_long:
        problems.append(
            f"{name}: {n_long} line(s) longer than {limits.max_line_bytes} bytes kept truncated to that size"
        )


def _regroup(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    """Join small reads into pieces of about `size` bytes."""
    parts, total = [], 0
    for chunk in chunks:
        parts.append(chunk)
        total += len(chunk)
        if total >= size:
            yield b"".join(parts)
            parts, total = [], 0
    if parts:
        yield b"".join(parts)


def _big(raw: bytes | pa.Buffer) -> pa.Array:
    """The whole block as one large_binary value, zero-copy."""
    buf = raw if isinstance(raw, pa.Buffer) else pa.py_buffer(raw)
    offsets = pa.py_buffer(np.array([0, buf.size], dtype=np.int64))
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, buf])


def _value_buffer(big: pa.Array) -> np.ndarray:
    start, end = np.frombuffer(big.buffers()[1], dtype=np.int64)[big.offset : big.offset + 2]
    return np.frombuffer(big.buffers()[2], dtype=np.uint8)[start:end]


def decode_block(raw: bytes, max_line_bytes: int = 2**62) -> Lines:
    """Decode a block of whole lines into an Arrow string array: ANSI escapes and line endings removed.

    Invalid UTF-8 is replaced by U+FFFD, and the lines that needed it are counted. Lines longer than
    `max_line_bytes` are cut to that size.
    """
    big = _big(raw)
    if b"\x1b" in raw:
        big = pc.replace_substring_regex(big, ANSI_RE, b"")
    if b"\r\n" in raw:
        big = pc.replace_substring(big, b"\r\n", b"\n")
    arr = _value_buffer(big)
    nl = np.flatnonzero(arr == 10)
    data = arr.tobytes().replace(b"\n", b"")
    n = len(nl)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    np.subtract(nl, np.arange(n), out=offsets[1:], casting="unsafe")
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    if n and np.diff(offsets).max() > max_line_bytes:
        cut = pc.binary_slice(pa.Array.from_buffers(pa.binary(), n, buffers), 0, max_line_bytes)
        n_long = int((np.diff(offsets) > max_line_bytes).sum())
        lines = decode_block(b"\n".join(cut.to_pylist()) + b"\n", max_line_bytes)
        lines.n_truncated = n_long
        return lines
    text = pa.Array.from_buffers(pa.utf8(), n, buffers)
    try:
        text.validate(full=True)
        return Lines(text, 0)
    except pa.ArrowInvalid:
        pass
    binary = pa.Array.from_buffers(pa.binary(), n, buffers)
    had_fffd = pc.sum(pc.match_substring(binary, "\ufffd")).as_py() or 0
    fixed = bytes(arr).decode("utf-8", "replace").encode("utf-8")
    again = decode_block(fixed, max_line_bytes)
    now_fffd = pc.sum(pc.match_substring(again.text, "\ufffd")).as_py() or 0
    return Lines(again.text, max(1, now_fffd - had_fffd))


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
    )


def _mask(arr: pa.Array) -> np.ndarray:
    return pc.fill_null(arr, False).to_numpy(zero_copy_only=False)


def _scatter(n: int, idx: np.ndarray, values: pa.Array, type_: pa.DataType) -> pa.Array:
    """A length-n array, null except `values` at positions `idx`."""
    if len(idx) == 0:
        return pa.nulls(n, type_)
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx))
    return values.take(pa.array(pos, mask=pos < 0))


def classify(text: pa.StringArray) -> Classified:
    """Kind, Ray prefix, phase hint and timestamp of every line."""
    n = len(text)
    kind = np.zeros(n, dtype=np.int8)
    config_open = np.zeros(n, dtype=bool)
    resume_marker = np.zeros(n, dtype=bool)
    cand_idx = np.flatnonzero(_mask(pc.match_substring_regex(text, CANDIDATE_RE)))
    phase = pa.nulls(n, pa.string())
    if len(cand_idx):
        sub = text.take(pa.array(cand_idx))
        is_step = _mask(pc.match_substring_regex(sub, STEP_ANY_RE))
        # the other patterns only look at the short non-step lines: step lines are most of the bytes
        rest_idx = np.flatnonzero(~is_step)
        rest = sub.take(pa.array(rest_idx))
        m = {
            name: _mask(pc.match_substring_regex(rest, pat))
            for name, pat in (
                ("memory", MEMORY_RE),
                ("config", CONFIG_RE),
                ("error", ERROR_STRONG_RE),
                ("warning", WARNING_RE),
                ("weak", ERROR_WEAK_RE),
                ("progress", PROGRESS_RE),
            )
        }
        rest_kind = np.select(
            [m["memory"], m["config"], m["error"], m["warning"], m["weak"], m["progress"]],
            [K_MEMORY, K_CONFIG, K_ERROR, K_WARNING, K_ERROR, K_PROGRESS],
            K_OTHER,
        ).astype(np.int8)
        sub_kind = np.full(len(cand_idx), K_STEP, dtype=np.int8)
        sub_kind[rest_idx] = rest_kind
        kind[cand_idx] = sub_kind
        rest_at = cand_idx[rest_idx]
        opened = np.flatnonzero(m["config"])
        if len(opened):
            opened_text = rest.take(pa.array(opened))
            config_open[rest_at[opened[_mask(pc.match_substring_regex(opened_text, CONFIG_OPEN_RE))]]] = True
            resume_marker[rest_at[opened[_mask(pc.match_substring_regex(opened_text, RESUME_RE))]]] = True
        names = pc.struct_field(pc.extract_regex(rest, PHASE_RE), [0])
        mapped = pc.take(pa.array(list(PHASES.values())), pc.index_in(names, pa.array(list(PHASES))))
        phase = _scatter(n, rest_at, mapped, pa.string())
        trace = np.flatnonzero(_mask(pc.match_substring_regex(rest, TRACE_FILE_RE)))
        _mark_trace_code_lines(text, kind, rest_at[trace])
    component, pid = _prefix(text)
    return Classified(kind, component, pid, phase, _timestamps(text), config_open, resume_marker)


def _mark_trace_code_lines(text: pa.StringArray, kind: np.ndarray, file_lines: np.ndarray) -> None:
    """The source line printed under a traceback's `File "...", line N` belongs to the error."""
    nxt = file_lines + 1
    nxt = nxt[nxt < len(kind)]
    nxt = nxt[kind[nxt] == K_OTHER]
    if len(nxt):
        indented = _mask(pc.match_substring_regex(text.take(pa.array(nxt)), OPT_PREFIX + r"\s{2,}\S"))
        kind[nxt[indented]] = K_ERROR


def _prefix(text: pa.StringArray) -> tuple[pa.Array, pa.Array]:
    """Component and pid of the Ray prefix; parsed once per distinct prefix (a run has few)."""
    n = len(text)
    has = np.flatnonzero(_mask(pc.match_substring_regex(text, PREFIX_RE)))
    if len(has) == 0:
        return pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    heads = pc.utf8_slice_codeunits(text.take(pa.array(has)), 0, 128)
    heads = pc.list_element(pc.split_pattern(heads, ")", max_splits=1), 0)
    distinct = pc.dictionary_encode(heads)
    ex = pc.extract_regex(pc.binary_join_element_wise(distinct.dictionary, ")", ""), PREFIX_RE)
    comp, pid_s, raylet = (pc.struct_field(ex, [i]) for i in range(3))
    pid_s = pc.if_else(pc.equal(pid_s, ""), None, pid_s)
    comp = pc.if_else(pc.equal(comp, ""), pc.if_else(pc.is_null(pid_s), None, "pid"), comp)
    comp = pc.if_else(pc.equal(raylet, "raylet"), "raylet", comp)
    comp, pid = comp.take(distinct.indices), pc.cast(pid_s, pa.int64()).take(distinct.indices)
    return _scatter(n, has, comp, pa.string()), _scatter(n, has, pid, pa.int64())


def _timestamps(text: pa.StringArray) -> pa.Array:
    n = len(text)
    found = _mask(pc.match_substring_regex(text, TS_RE))
    idx = np.flatnonzero(found)
    if len(idx) == 0:
        return pa.nulls(n, pa.timestamp("us"))
    raw = pc.struct_field(pc.extract_regex(text.take(pa.array(idx)), TS_RE), [0])
    raw = pc.replace_substring(pc.replace_substring(raw, ",", "."), "T", " ")
    try:
        ts = pc.cast(raw, pa.timestamp("us"))
    except pa.ArrowInvalid:
        ts = pc.strptime(pc.utf8_slice_codeunits(raw, 0, 19), "%Y-%m-%d %H:%M:%S", "us", error_is_null=True)
    return _scatter(n, idx, ts, pa.timestamp("us"))
