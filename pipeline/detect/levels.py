"""Robust local levels of series kept one after another in one array (runs, or run x signal groups).

A row's level comes from the clean rows around it in its own group, never from itself, so an
anomalous step or stretch is not part of its own baseline. Everything is a cumulative sum, restarted
at each run (a Python step per run, none per group): a run's levels are then the same bit for bit
whichever runs share the array, so a run scored alone (`analyze --run`) or in any batch scores the same.
"""

from __future__ import annotations

import numpy as np

HALF_WINDOW = 10  # clean rows on each side of the current one in the baseline
MIN_PERIODS = 3  # fewer clean rows than this on a side: that side is not used


def group_bounds(groups) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the first row of its group and one past its last (rows sorted by group)."""
    codes = np.asarray(groups)
    n = len(codes)
    new = np.ones(n, dtype=bool)
    new[1:] = codes[1:] != codes[:-1]
    starts = np.flatnonzero(new)
    ends = np.r_[starts[1:], n]
    sizes = ends - starts
    return np.repeat(starts, sizes), np.repeat(ends, sizes)


def _line_from(c, at: np.ndarray) -> np.ndarray:
    """Least-squares line read at position `at`, from a window's sums of w, wx, wx^2, wy, wxy.

    Fewer than MIN_PERIODS clean rows give NaN; rows all at one position give their mean.
    """
    c0, c1, c2, t0, t1 = c
    with np.errstate(invalid="ignore", divide="ignore"):
        xbar = c1 / c0
        ybar = t0 / c0
        sxx = c2 - c1 * xbar
        sxy = t1 - c1 * ybar
        slope = np.where(sxx > 1e-9, sxy / sxx, 0.0)
        line = ybar + slope * (at - xbar)
    return np.where(c0 >= MIN_PERIODS, line, np.nan)


def local_level(values: np.ndarray, clean: np.ndarray, g0: np.ndarray, g1: np.ndarray):
    """Two levels of each row from the clean rows of its group (the row excluded); g0/g1 from group_bounds,
    each group a run (its sums restart there).

    Windows count clean rows, not rows, so a long anomalous stretch is skipped over rather than
    leaving its own steps as their baseline.
    The two-sided level: the least-squares line through the HALF_WINDOW clean rows before and
    the HALF_WINDOW after, read at the row, so a linear trend does not bias it (at a run's edge
    it is extended from one side); NaN without MIN_PERIODS clean rows.
    The trailing level: the mean of the HALF_WINDOW clean rows before (NaN without history); it
    sees a level shift in full where the two-sided one, half in the shift, sees it only partly.
    """
    h = HALF_WINDOW
    n = len(values)
    i = np.arange(n)
    x = (i - g0).astype(float)  # position in the group: small numbers keep the sums exact
    cc = np.r_[0, np.cumsum(clean)]
    keep = np.flatnonzero(clean)
    xc, yc = x[keep], values[keep]
    sums = run_prefix_sums(np.column_stack([np.ones(len(keep)), xc, xc * xc, yc, xc * yc]), cc[i[i == g0]])
    shift = _run_number(g0)
    before, upto = cc[i] + shift, cc[i + 1] + shift  # clean rows before i, and up to and including i
    first, end = cc[g0] + shift, cc[g1] + shift  # the group's clean rows, as ordinals
    lo, hi = np.maximum(before - h, first), np.minimum(upto + h, end)
    level = _line_from([s[hi] - s[lo] - (s[upto] - s[before]) for s in sums], x)
    lo_t = np.maximum(before - h, first)
    cnt = before - lo_t
    with np.errstate(invalid="ignore", divide="ignore"):
        trailing = np.where(cnt >= MIN_PERIODS, (sums[3][before] - sums[3][lo_t]) / cnt, np.nan)
    return level, trailing


def _run_number(r0: np.ndarray) -> np.ndarray:
    """Each row's run, counted from 0 (`r0`: the first row of the row's run; rows grouped by run)."""
    return np.cumsum(np.arange(len(r0)) == r0) - 1


def run_prefix_sums(columns: np.ndarray, starts: np.ndarray) -> list[np.ndarray]:
    """Prefix sums of each column of `columns` (rows x k), restarted at each run: `starts` are the runs'
    first rows (increasing, from 0; a run with no rows repeats the next start). Each run has a leading
    zero of its own, so run r's prefix at its row boundary b sits at b + r: a window [a, b) of run r
    sums to p[b + r] - p[a + r], with the very floats that run alone gives."""
    n = len(columns)
    out = np.zeros((n + len(starts), columns.shape[1]))
    ends = np.r_[starts[1:], n].tolist()
    for r, (s, e) in enumerate(zip(starts.tolist(), ends, strict=True)):
        np.cumsum(columns[s:e], axis=0, out=out[s + r + 1:e + r + 1])
    return list(np.ascontiguousarray(out.T))


class LineSums:
    """Cumulative sums of the clean rows of grouped series, from which `local_line` reads windowed
    lines: computed once per clean mask, read for several windows. `r0`: each row's run's first row
    (groups nest in runs; the sums restart at each run); the groups' own by default."""

    def __init__(self, values: np.ndarray, clean: np.ndarray, g0: np.ndarray, g1: np.ndarray,
                 r0: np.ndarray | None = None):
        r0 = g0 if r0 is None else r0
        i = np.arange(len(values))
        self.x = (i - g0).astype(float)  # position in the group: small numbers keep sums exact
        cc = np.r_[0, np.cumsum(clean)]
        keep = np.flatnonzero(clean)
        xc, yc = self.x[keep], values[keep]
        self.sums = run_prefix_sums(np.column_stack([xc, xc * xc, yc, xc * yc]), cc[i[i == r0]])
        # clean rows before each row, up to and including it, and its group's first and last, as ordinals
        # moved by the row's run number onto the restarted sums
        shift = _run_number(r0)
        self.before, self.upto = cc[:-1] + shift, cc[1:] + shift
        self.first, self.end = cc[g0] + shift, cc[g1] + shift


def _window(arr: np.ndarray, parts) -> np.ndarray:
    """Sum of `arr`'s increments over the index ranges `parts` (pairs of start, stop arrays)."""
    (a, b), *rest = parts
    out = arr[b]
    out -= arr[a]
    for a, b in rest:
        out += arr[b]
        out -= arr[a]
    return out


def local_line(values: np.ndarray, clean: np.ndarray, g0: np.ndarray, g1: np.ndarray, gap: int = 0,
               side: str = "both", sums: LineSums | None = None, slope: bool = False, r0: np.ndarray | None = None):
    """The least-squares line through the HALF_WINDOW clean rows on `side` of each row ("both",
    "before" or "after"), read at the row, with its prediction standard error in units of the noise.

    The row itself and the `gap` clean rows next to it on each side are left out, so that with a
    gap a short cluster of anomalous rows cannot vouch for its own members. The error factor is
    sqrt(1 + 1/n + (x - xbar)^2 / Sxx) of the window's line: about 1.05 in the middle of a series,
    larger where the line is extrapolated (a series' first and last rows, a one-sided line, next to
    a masked stretch), so residuals there count for less. Both are NaN with fewer than MIN_PERIODS
    clean rows. `sums` (LineSums of the same values and mask, or of `r0`'s runs) saves recomputing them. With `slope`,
    the line's slope (per row) is returned third.
    """
    s = sums or LineSums(values, clean, g0, g1, r0)
    h = HALF_WINDOW
    inner_lo = np.maximum(s.before - gap, s.first) if gap else s.before
    inner_hi = np.minimum(s.upto + gap, s.end) if gap else s.upto
    # the window is [lo, inner_lo) and [inner_hi, hi) in clean-row ordinals
    parts = []
    if side != "after":
        parts.append((np.maximum(inner_lo - h, s.first), inner_lo))
    if side != "before":
        parts.append((inner_hi, np.minimum(inner_hi + h, s.end)))
    c0 = sum((b - a).astype(float) for a, b in parts)
    c1, c2, t0, t1 = (_window(arr, parts) for arr in s.sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        # in place: these run over every metric value of the fleet
        c1 /= c0  # xbar
        t0 /= c0  # ybar
        c2 -= c1 * c1 * c0  # Sxx
        t1 -= c1 * t0 * c0  # Sxy
        flat = c2 <= 1e-9
        t1 /= c2  # slope
        t1[flat] = 0.0
        dx = s.x - c1
        level = t0 + t1 * dx
        dx *= dx
        dx /= c2
        dx[flat] = 0.0
        dx += 1.0
        dx += 1.0 / c0
        factor = np.sqrt(dx)
    few = c0 < MIN_PERIODS
    level[few] = np.nan
    factor[few] = np.nan
    if slope:
        t1[few] = np.nan
        return level, factor, t1
    return level, factor


def centred_median3(z: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Median of each row and its neighbours in the same group (of the ones present): a move that lasts
    two of the three steps keeps its size, a one-step spike does not spread to its neighbours.
    `first` and `last` mark each group's first and last rows."""
    prev = np.concatenate([[np.nan], z[:-1]])
    prev[first] = np.nan
    nxt = np.concatenate([z[1:], [np.nan]])
    nxt[last] = np.nan
    missing = [np.isnan(a) for a in (prev, z, nxt)]
    present = 3 - sum(m.astype(np.int8) for m in missing)
    total = sum(np.where(m, 0.0, a) for m, a in zip(missing, (prev, z, nxt), strict=True))
    # the median of three without a sort: the larger of the smallest pair and the smaller of the rest
    middle = np.maximum(np.minimum(prev, z), np.minimum(np.maximum(prev, z), nxt))
    with np.errstate(invalid="ignore"):
        return np.where(present == 3, middle, np.where(present == 2, total / 2, np.where(present == 1, total, np.nan)))
