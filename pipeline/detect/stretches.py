"""Stretches of consecutive steps of one run, on arrays sorted by run and step: numbering, lengths, growth."""

from __future__ import annotations

import numpy as np

# The opening steps of a run that starts off are a transient: the model does not call them `other`
# (the rules still judge them).
OPENING_STEPS, OPENING_SHARE = 10, 0.05
OPENING_MAX_SHARE = 0.1  # a run still unsettled past this share of its steps is judged all the same
SETTLED_STEPS = 3  # steps in a row where nothing moved: the run has settled
# a transient is as strong as the run's first two steps were: an episode from step 3 makes the run start
# off, but is not its transient
ENVELOPE_STEPS = 2


def run_starts(runs: np.ndarray) -> np.ndarray:
    """True on each run's first row."""
    return np.r_[True, runs[1:] != runs[:-1]] if len(runs) else np.zeros(0, bool)


def stretch_ids(runs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A number per stretch of consecutive `mask` rows of one run (0 outside)."""
    prev = np.r_[False, mask[:-1]]
    return np.where(mask, np.cumsum(mask & (run_starts(runs) | ~prev)), 0)


def stretch_lengths(runs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, the length of the stretch of consecutive `mask` rows of its run it belongs to (0 outside)."""
    ids = stretch_ids(runs, mask)
    return np.where(mask, np.bincount(ids)[ids], 0)


def grow(runs: np.ndarray, seed: np.ndarray, loose: np.ndarray) -> np.ndarray:
    """Steps in a run of consecutive `loose` steps that contains a `seed` step (hysteresis)."""
    comp = stretch_ids(runs, loose | seed)
    has_seed = np.bincount(comp, weights=seed.astype(float), minlength=comp.max() + 1) > 0
    has_seed[0] = False
    return has_seed[comp]


def opening(runs: np.ndarray, moved: np.ndarray, strength: np.ndarray | None = None) -> np.ndarray:
    """Rows in the opening transient of a run that starts off (some signal past its noise, `moved`, in
    its first three rows): until the run settles (its first SETTLED_STEPS rows in a row where nothing
    moved), at least its first max(OPENING_STEPS, OPENING_SHARE of its rows) rows and at most
    OPENING_MAX_SHARE of them. Training's opening is a transient (the critic warms up from scratch,
    the first validations precede learning) that is off from the first step and settles, in some
    runs over dozens of steps; a run that starts in line has no such excuse for what comes next.
    With `strength` (how far the row is off), a transient only fades: a row further off than the
    run's first ENVELOPE_STEPS rows were is something new, not part of it."""
    new = run_starts(runs)
    starts = np.flatnonzero(new)
    sizes = np.diff(np.r_[starts, len(runs)])
    position = np.arange(len(runs)) - np.repeat(starts, sizes)
    run_no = np.repeat(np.arange(len(starts)), sizes)
    starts_off = np.bincount(run_no, weights=(moved & (position < 3)).astype(float), minlength=len(starts)) > 0
    settled = np.minimum.reduceat(np.where(_quiet_ahead(runs, moved), position, len(runs)), starts) if len(runs) else sizes
    least = np.maximum(OPENING_STEPS, OPENING_SHARE * sizes)
    window = np.clip(settled, least, np.maximum(least, OPENING_MAX_SHARE * sizes))
    out = np.repeat(starts_off, sizes) & (position < np.repeat(window, sizes))
    if strength is not None and len(runs):
        envelope = np.full(len(starts), -np.inf)
        lead = position < ENVELOPE_STEPS
        np.maximum.at(envelope, run_no[lead], np.nan_to_num(strength[lead], nan=-np.inf))
        out &= ~(strength > envelope[run_no])
    return out


def _quiet_ahead(runs: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """Rows that begin SETTLED_STEPS rows of their run in a row where nothing moved."""
    quiet = ~moved
    out = quiet.copy()
    for k in range(1, SETTLED_STEPS):
        # the last k rows have no row k ahead (all rows, when there are fewer than k + 1)
        ahead = np.zeros(len(runs), bool)
        ahead[: max(len(runs) - k, 0)] = quiet[k:] & (runs[k:] == runs[:-k])
        out &= ahead
    return out
