"""The vectorised helpers of ingest give exactly what the plain Arrow / Python formulations give."""

from __future__ import annotations

import random
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.ingest import linescan
from pipeline.ingest.config import ConfigCollector, bracket_deltas
from pipeline.ingest.lines import (
    ANSI_RE,
    K_ERROR,
    K_OTHER,
    K_STEP,
    RESUME_RE,
    SCAN_PATTERNS,
    TRACE_FILE_RE,
    _has_crlf,
    _prefix,
    _strip_ansi,
    classify,
    decode_block,
    split_once,
)
from pipeline.ingest.memory import run_maxima

TRICKY = ["", ":", "::", "a", "a:b", "a:b:c", "é:ü:1.5", "key: 1.0", ":tail", "head:", None]
TRICKY += ["np.float64(1.5)", "(("]


def _random_items(seed: int, n: int) -> list[str | None]:
    rng = random.Random(seed)
    alphabet = "ab:(é -1"
    return [
        None if rng.random() < 0.05 else "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 9)))
        for _ in range(n)
    ]


def _reference(items: pa.Array, sep: str, last: bool) -> tuple[list, list]:
    parts = pc.split_pattern(items, sep, max_splits=1, reverse=last).to_pylist()
    before = [None if p is None else p[0] for p in parts]
    after = [None if p is None or len(p) < 2 else p[1] for p in parts]
    return before, after


@pytest.mark.parametrize("sep", [":", "("])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_once_matches_arrow_split(sep: str, last: bool, seed: int) -> None:
    values = TRICKY + _random_items(seed, 500)
    # a slice, so that the array's offset and its data buffer's start are not zero
    items = pa.array(["pad:(", *values], pa.string()).slice(1)
    before, after, found = split_once(items, sep, last=last)
    want_before, want_after = _reference(items, sep, last)
    assert before.to_pylist() == want_before
    assert after.to_pylist() == want_after
    assert found.tolist() == [a is not None for a in want_after]


def test_ray_prefix_of_the_lines_that_open_one() -> None:
    """Component and pid from `(Name pid=N, ip=...)` heads, `raylet` for `(raylet)`; a bracket that opens
    no Ray prefix, or a line without one, gives nulls."""
    text = pa.array(["(WorkerDict pid=7, ip=10.0.0.1) x", "no prefix", "(raylet) y", "(open", "(a) (b)",
                     "(pid=3) z", "(TaskRunner pid=12) w"], pa.string())
    component, pid = _prefix(text)
    assert component.to_pylist() == ["WorkerDict", None, "raylet", None, None, "pid", "TaskRunner"]
    assert pid.to_pylist() == [7, None, None, None, None, 3, 12]
    assert [c.to_pylist() for c in _prefix(text.slice(2, 1))] == [["raylet"], [None]]
    assert [c.to_pylist() for c in _prefix(text.slice(1, 1))] == [[None], [None]]
    empty = split_once(pa.array([], pa.string()), ")")
    assert empty[0].to_pylist() == [] and empty[2].tolist() == []


def test_run_maxima_per_run_of_equal_keys() -> None:
    rng = np.random.default_rng(5)
    n = 2000
    key = np.sort(rng.integers(0, 4, n)).astype(np.int8)
    step = rng.integers(0, 6, n)
    step.sort(kind="stable")
    value = rng.integers(0, 5, n).astype(np.float64)  # many ties: the earliest line must win
    line_no = np.arange(n) * 3 + 7
    first, best, line = run_maxima([key, step], value, line_no)
    runs: list[list[int]] = []
    for i in range(n):
        if i and key[i] == key[i - 1] and step[i] == step[i - 1]:
            runs[-1].append(i)
        else:
            runs.append([i])
    assert first.tolist() == [r[0] for r in runs]
    assert best.tolist() == [max(value[r]) for r in runs]
    assert line.tolist() == [min(line_no[i] for i in r if value[i] == max(value[r])) for r in runs]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_strip_ansi_removes_what_the_regex_removes(seed: int) -> None:
    rng = random.Random(seed)
    pieces = [b"\x1b[36m", b"\x1b[0m", b"\x1b[1;31m", b"\x1b[?25l", b"\x1b(B", b"\x1b="]
    pieces += [b"\x1b", b"\x1b[", b"\x1b[12"]  # cut sequences: kept
    words = [b"(TaskRunner pid=1) ", b"step:1 - a:1", b"\n", b"\r", b"x", b"\xc3\xa9", b"[", b"m", b"0"]
    raw = b"".join(rng.choice(pieces if rng.random() < 0.3 else words) for _ in range(3000)) + b"\n"
    assert _strip_ansi(raw).to_pybytes() == re.sub(ANSI_RE.encode(), b"", raw)
    assert _strip_ansi(b"\x1b[0m\n").to_pybytes() == b"\n"


def test_colour_codes_that_lost_their_escape_are_removed_beside_real_ones() -> None:
    """A block holding both real escape sequences and `[0m` remnants loses both; without a remnant `[0m`,
    bracketed text that looks like a colour code is kept."""
    mixed = b"[36m(TaskRunner pid=1)[0m step:1 - a:1\n\x1b[33m(raylet)\x1b[0m up\n"
    assert decode_block(mixed).text.to_pylist() == ["(TaskRunner pid=1) step:1 - a:1", "(raylet) up"]
    kept = b"\x1b[36m(TaskRunner pid=1)\x1b[0m waited [3m] for [12m]\n"
    assert decode_block(kept).text.to_pylist() == ["(TaskRunner pid=1) waited [3m] for [12m]"]


def test_crlf_is_told_from_tqdm_carriage_returns() -> None:
    assert not _has_crlf(b"10%|#  | 1/10\r20%|## | 2/10\rdone\n")
    assert _has_crlf(b"a\r\n")
    assert not _has_crlf(b"a\rb\r")
    assert not _has_crlf(b"")


needs_hyperscan = pytest.mark.skipif(linescan.hyperscan is None, reason="the hyperscan package is not installed")


@needs_hyperscan
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_scan_matches_each_line_like_re2(seed: int) -> None:
    """Hyperscan over the joined block flags the lines Arrow's RE2 flags, pattern by pattern."""
    rng = random.Random(seed)
    words = ["(TaskRunner pid=1) ", "(", ")", " ", "\t", "\r", "step:3 - a:1", "step=2, x=1", '{"step": 4',
             '{"step":', "7", "  File \"a.py\", line 3", "^^^", "ValueError:", "Error", "WARNING", "UserWarning",
             "10%|", "| 3/9 [", "memory allocated (GB): 1", "{'actor_rollout_ref': ", "Training from scratch",
             "update_actor", "compute_log_prob", " - k:v", "é", "E1201 12:00:00", "[E123 4", "INFO:",
             "2025-03-01 10:00:00,123", "[2025-03-01T10:00:00"]
    lines = ["".join(rng.choice(words) for _ in range(rng.randrange(0, 7))) for _ in range(3000)]
    text = pa.array(lines, pa.string())
    got = linescan.line_matches(text, SCAN_PATTERNS)
    for k, pattern in enumerate(SCAN_PATTERNS):
        want = pc.match_substring_regex(text, pattern).to_numpy(zero_copy_only=False)
        assert got[k].tolist() == want.tolist(), pattern


@needs_hyperscan
def test_a_match_never_reaches_into_the_next_line() -> None:
    """A Ray prefix left open, a JSON step key, blanks before a caret line: each line is judged alone."""
    lines = decode_block(b'(TaskRunner pid=1\nx) {"step": 3}\n{"step":\n5 apples\n  \n^^^\n')
    assert lines.joined is not None
    assert classify(lines.text, lines.joined).kind.tolist() == [K_OTHER] * 5 + [K_ERROR]
    assert linescan.single_line(r"^\([^)]*\)\s+[\s,]x") == r"\n\([^\n)]*\)[\t\f\r ]+[\t\f\r ,]x"
    with pytest.raises(ValueError):
        linescan.single_line(r"a\Db")


@needs_hyperscan
def test_the_traceback_line_hyperscan_misses_with_a_caret_anchor_is_found() -> None:
    """Hyperscan 5.4 with `^` as its multi-line anchor misses this traceback line (these two patterns, after
    an empty line); written as the `\\n` before the line, the anchor finds it."""
    text = pa.array(["ompute_log_probWARNING", "", '(Training from scratch) File "", line 3'])
    found = linescan.LineScanner([TRACE_FILE_RE, RESUME_RE]).matches(text)
    assert found.tolist() == [[False, False, True], [False, False, False]]


@needs_hyperscan
def test_classify_with_and_without_hyperscan_agree_on_the_real_logs(real_logs_dir, monkeypatch) -> None:
    """Every column `classify` gives, with one Hyperscan pass and with Arrow's kernels, on every real log."""
    for log in sorted(real_logs_dir.glob("*.log")):
        lines = decode_block(log.read_bytes().rstrip(b"\n") + b"\n")
        fast = classify(lines.text, lines.joined)
        with monkeypatch.context() as off:
            off.setattr(linescan, "hyperscan", None)
            plain = classify(lines.text)
        assert (fast.kind == K_STEP).sum() == (plain.kind == K_STEP).sum()
        for name in ("kind", "config_open", "resume_marker"):
            assert getattr(fast, name).tolist() == getattr(plain, name).tolist(), (log.name, name)
        for name in ("component", "pid", "phase_hint", "ts"):
            assert getattr(fast, name).equals(getattr(plain, name)), (log.name, name)


def _bracket_delta_by_hand(line: str) -> int:
    """The rule, one character at a time: brackets count outside quotes; a backslash escapes inside them."""
    depth, quote, escaped = 0, "", False
    for ch in line:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
    return depth


@pytest.mark.parametrize("seed", [1, 2])
def test_bracket_deltas_count_outside_quotes(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = ["{", "}", "[", "]", "(", ")", "'", '"', "\\", "a", " ", "é", ":"]
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(3000)]
    lines += ["'a': {'b(': [1, 2],", "'x\\' [': (", "'open [", "", "é{", ")))", "\"q\\\\\" ["]
    got = bracket_deltas(pa.array(["pad{", *lines], pa.string()).slice(1))
    assert got.tolist() == [_bracket_delta_by_hand(line) for line in lines]
    assert bracket_deltas(pa.array(["'a': {'b(': [1, 2],", "'open [", "]}"])).tolist() == [1, 0, -2]


def test_config_dump_collected_across_blocks_around_other_output() -> None:
    """A dump's lines (its prefix, continuation lines) are taken until its brackets close, over two blocks;
    another process's line and a warning of its own process inside it are left out."""
    first = pa.array([
        "(TaskRunner pid=5) {'actor_rollout_ref': {'a': 1,",
        "(Worker pid=9) {'b': 2}",
        "(TaskRunner pid=5) WARNING: something",
        "(TaskRunner pid=5)                        'c': [1,",
    ])
    second = pa.array([
        "(TaskRunner pid=5)                              2]},",
        "(TaskRunner pid=5)  'd': 'x}'}",
        "(TaskRunner pid=5)  'e': 3}",
    ])
    dump = ConfigCollector(first[0].as_py())
    taken, offered = dump.take(first, 0)
    assert taken.tolist() == [0, 3] and offered == 4 and not dump.done
    taken, offered = dump.take(second, 0)
    assert taken.tolist() == [0, 1] and offered == 2 and dump.done
    assert dump.parse()[0] == {"actor_rollout_ref": {"a": 1, "c": [1, 2]}, "d": "x}"}
