"""Which lines of a block match each of many patterns, in one Hyperscan pass over the block.

Arrow's RE2 kernels run one pattern at a time over every line; Hyperscan matches all of them in a single
scan of the block's bytes (the lines, each after a `\\n`). Each RE2 pattern is rewritten so that nothing in
it can match a newline except where a `^` stood, which gives the same per-line answer: `\\s` is RE2's
`[\\t\\n\\f\\r ]` without the `\\n`, every negated class gains a `\\n`, and `^` is the `\\n` before the line.
That last one works around a Hyperscan 5.4 bug: with `^` as a multi-line anchor, some patterns sharing a
start miss matches after an empty line (seen in random tests against RE2; with `\\n` none in 2.8 million
lines). Without the `hyperscan` package `line_matches` returns None and callers use Arrow.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    import hyperscan
except ImportError:  # an optional speed-up: Arrow's kernels do the same work
    hyperscan = None

_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def enabled() -> bool:
    """Whether `line_matches` uses Hyperscan (the package is installed)."""
    return hyperscan is not None


def single_line(pattern: str) -> str:
    """An RE2 pattern rewritten for a scan of lines each after a `\\n`: only its `^`, now `\\n`, matches one."""
    out: list[str] = []
    i, in_class = 0, False
    pattern = _NAMED_GROUP.sub("(?:", pattern)  # Hyperscan reports no groups
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            esc = pattern[i : i + 2]
            if esc == r"\s":
                out.append(r"\t\f\r " if in_class else r"[\t\f\r ]")
            elif esc in (r"\W", r"\D"):  # both match `\n`: no pattern of ours uses them
                raise ValueError(f"{esc} is not rewritten for a multi-line scan: {pattern}")
            else:
                out.append(esc)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            if pattern[i + 1] == "^":
                out.append(r"[^\n")
                i += 2
                continue
        elif c == "]" and in_class:
            in_class = False
        elif c == "^" and not in_class:
            c = r"\n"
        out.append(c)  # without HS_FLAG_DOTALL a dot does not match `\n`
        i += 1
    return "".join(out)


class LineScanner:
    """Patterns compiled once into one Hyperscan database; each thread scans with its own scratch."""

    def __init__(self, patterns: list[str]):
        self.n_patterns = len(patterns)
        # vectored: the `\\n` before the first line is a buffer of its own, the block is not copied
        self.db = hyperscan.Database(mode=hyperscan.HS_MODE_VECTORED)
        self.db.compile(
            expressions=[single_line(p).encode() for p in patterns],
            ids=list(range(len(patterns))),
            flags=hyperscan.HS_FLAG_MULTILINE,
        )
        self._local = threading.local()

    def matches(self, text: pa.StringArray, joined: pa.Buffer | None = None) -> np.ndarray:
        """A (patterns, lines) boolean array: whether pattern k matches line i.

        `joined`, if given, holds the lines each followed by `\\n` (the block they were split from).
        """
        n = len(text)
        out = np.zeros((self.n_patterns, n), dtype=bool)
        if n == 0:
            return out
        if joined is None:
            one_list = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), text)
            joined = pc.binary_join(one_list, "\n")[0].as_buffer()
        ids: list[int] = []
        ends: list[int] = []

        def on_match(pattern_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ids.append(pattern_id)
            ends.append(end)

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self.db)
        self.db.scan([b"\n", joined], match_event_handler=on_match, scratch=scratch)
        if ids:
            lengths = pc.binary_length(text).to_numpy(zero_copy_only=False).astype(np.int64)
            starts = np.concatenate([[1], 1 + np.cumsum(lengths + 1)[:-1]])  # after the `\n` scanned first
            # a match ends inside its line: nothing in the patterns matches the `\n` after it
            line = np.searchsorted(starts, np.asarray(ends, dtype=np.int64), side="right") - 1
            out[np.asarray(ids, dtype=np.int64), line] = True
        return out


_scanners: dict[tuple[str, ...], LineScanner] = {}
_lock = threading.Lock()


def line_matches(
    text: pa.StringArray, patterns: tuple[str, ...], joined: pa.Buffer | None = None
) -> np.ndarray | None:
    """Per pattern, per line: whether it matches (RE2 search semantics), or None without Hyperscan.

    `joined`, if given, holds the lines each followed by `\\n`.
    """
    if not enabled():
        return None
    with _lock:
        scanner = _scanners.get(patterns)
        if scanner is None:
            scanner = _scanners[patterns] = LineScanner(list(patterns))
    return scanner.matches(text, joined)
