"""Every numeric signal a run logs, each against the run's own baseline, summed up per step for the model.

The input is `step_metrics` (long: run_id, step, key, value, segment), whatever keys the run's verl
version logged. Each (run, key) series (its final timeline: a step redone after a resume counts once) is put on a scale where changes add up
(a signed log in units of its typical magnitude), given a baseline from its clean neighbours
(`levels.local_line`, with the line's prediction error) and a noise level from its own step-to-step changes, taken from the tail
of those changes as well as their middle so that a signal that swings several-fold from step to
step is judged against its swings. The per-key z-scores are then summed up per step into a fixed
set of features per signal family (`FAMILIES`), which is what the fleet's model sees: runs that
log different keys still give the same columns, and a family the run does not log reads 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.detect.levels import LineSums, centred_median3, group_bounds, local_line

# family -> key prefixes, first match wins (so critic/score/ is "reward" before "critic/" matches)
FAMILIES = (
    ("reward", ("critic/score/", "critic/rewards/", "critic/kl", "reward/")),
    ("advantage", ("critic/advantages/", "critic/returns/")),
    ("critic", ("critic/",)),
    ("policy", ("actor/",)),
    ("response", ("response_length", "response/")),
    ("prompt", ("prompt_length/", "num_turns/")),
    ("batch", ("global_seqlen/", "perf/total_num_tokens")),
    ("timing", ("timing_s/", "timing/", "timing_per_token_ms/", "perf/time_per_step", "perf/throughput",
                "perf/mfu/", "mfu/")),
    ("memory", ("perf/max_memory", "perf/cpu_memory", "memory/")),
    ("validation", ("val-core/", "val-aux/", "val/")),
    ("misc", ("",)),
)
FAMILY_NAMES = tuple(name for name, _ in FAMILIES)
# Settings and counters the trainer sets rather than measures (learning rates, KL coefficients, the
# step and epoch), profiler stubs, and the timers of validation and checkpointing, which run only on
# their own steps and are judged by the reports, not per step.
IGNORED = ("training/", "/lr", "lr(", "kl_coef", "_coeff", "global_step", "epoch", "timing_s/start_profile",
           "timing_s/stop_profile", "timing_s/testing", "timing/testing", "timing_s/save_checkpoint",
           "timing/save_checkpoint")
PERIODIC_KEYS = ("timing_s/testing", "timing/testing", "timing_s/save_checkpoint", "timing/save_checkpoint")

# Shares of the batch (responses cut at the length limit, aborted rollouts, clipped tokens): a fraction
# in [0, 1] whose size, not its ratio to a near-zero usual value, says how much is affected.
SHARE_KEYS = r"clip_ratio|aborted_ratio|clipfrac"
SHARE_SCALE = 0.1
STILL_SHARE = 0.9  # a series that does not change on this share of its steps: any change is news ...
STILL_CHANGES = 2  # ... when it is a share of the batch or changed at most this often
SCALE_FLOOR = 0.02  # smallest noise level (transformed units: about 2% of the typical magnitude)
MASK_Z = 3.0  # |z| above which a row is kept out of the baseline
# The noise level also covers this quantile of |step-to-step change| (TAIL_Z: its value for unit
# Gaussian noise): a step is judged on dozens of signals at once, so their tails matter more than
# for the named channels (features.TAIL_Q).
TAIL_Q, TAIL_Z = 0.9, 1.6449
FIRST_PASS_GAP = 2  # neighbours on each side the masking line leaves out
STEEPER = 0.05  # noise units per row a past line may be steeper than the two-sided one and still excuse a row
PAST_FACTOR = 1.5  # the largest error factor (levels.local_line) of a past line that may excuse a row
MIN_SERIES = 12  # a series with fewer finite values has no baseline to speak of: its z is 0
# A phase timer (seconds) whose typical time is under this share of the run's typical step time says nothing
# about the run's pace: 0.01 s of advantage computation that takes 0.4 s once is no slowdown of a 10 s step
STEP_TIMERS = ("timing_s/step", "timing/step", "perf/time_per_step")  # one of the copies is kept (_copies)
MIN_TIMER_SHARE = 0.01
Z_CLIP = 30.0
WARMUP_STEPS = 2  # a resume segment's first steps load and compile: their timing is not judged here
MOVED_Z = 3.0  # a key whose 3-step |z| is past this has moved beyond its noise (`sig_moved`)
# step_metrics rows summed up at a time: arrays of a few MB, which the allocator reuses (past 32 MB each
# temporary is a fresh mapping the kernel has to zero: at 15M rows that doubled the time)
CHUNK_ROWS = 1_000_000
# bits of a value's place among its group's in the one sort of `_group_quantiles_of` (the rest, 23 bits, number
# the groups: a chunk of CHUNK_ROWS rows has far fewer series than 2^23)
FRACTION_BITS = 40
FRACTION_ONE = 1 << FRACTION_BITS


def family_of(key: str) -> str | None:
    """The signal family of a verl metric key, None for keys the model ignores (settings, counters)."""
    if any(part in key for part in IGNORED):
        return None
    for name, prefixes in FAMILIES:
        if key.startswith(prefixes):
            return name
    return "misc"


def _negligible_timers(run: np.ndarray, key: np.ndarray, keys: pd.Index, typical: np.ndarray, n_runs: int) -> np.ndarray:
    """Rows of phase timers (`timing_s/`, `timing/`: seconds) whose typical time is under MIN_TIMER_SHARE of
    their run's typical step time (False where the run logs no step timer)."""
    names = pd.Series(np.asarray(keys, dtype=object))
    step_codes = np.flatnonzero(names.isin(STEP_TIMERS))
    timer_codes = np.flatnonzero(names.str.startswith(("timing_s/", "timing/")) & ~names.isin(STEP_TIMERS))
    step_typical = np.full(n_runs, np.nan)
    at_step = np.isin(key, step_codes)
    step_typical[run[at_step]] = typical[at_step]
    with np.errstate(invalid="ignore"):
        return np.isin(key, timer_codes) & (typical < MIN_TIMER_SHARE * step_typical[run])


def _codes(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Integer codes of a column and their labels (a categorical's own codes when it is one)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(dtype=np.int64), pd.Index(column.cat.categories)
    codes, labels = pd.factorize(column)
    return codes.astype(np.int64), pd.Index(labels)


def _step_code(run: np.ndarray, step: np.ndarray) -> np.ndarray:
    """One integer per (run, step)."""
    return run * (1 << 32) + step


def _final_timeline(run, step, key, segment) -> np.ndarray:
    """Rows to keep: of a step logged in several segments (redone after a resume), the last one."""
    keep = np.ones(len(run), dtype=bool)
    resumed = np.unique(run[segment > 0])
    rows = np.flatnonzero(np.isin(run, resumed))
    if len(rows):
        order = rows[np.lexsort((segment[rows], key[rows], step[rows], run[rows]))]
        r, st, k = run[order], step[order], key[order]
        later = np.r_[(r[:-1] == r[1:]) & (st[:-1] == st[1:]) & (k[:-1] == k[1:]), False]
        keep[order[later]] = False
    return keep


def _grouped(run: np.ndarray, key: np.ndarray, step: np.ndarray) -> np.ndarray:
    """An order that puts rows by run, key code and step (the identity when they already are): one order
    for a run's rows whichever runs share the array."""
    code = (run << 40) | (key << 24) | step
    if len(code) < 2 or bool(np.all(code[1:] > code[:-1])):
        return np.arange(len(code))
    return np.argsort(code, kind="stable")


def _copies(value: np.ndarray, key_name: np.ndarray, run: np.ndarray, starts: np.ndarray, sizes: np.ndarray):
    """Rows of series that repeat an earlier series of the same run value for value (verl logs several
    keys under two names: rewards and scores without a KL penalty, the non-aborted lengths, ...); of
    the copies, the key that sorts first is kept."""
    position = np.arange(len(value)) - np.repeat(starts, sizes)
    weight = np.sin(position * 0.618 + 1.0) + 2.0  # a checksum that sees the order of the values
    digest = np.add.reduceat(np.nan_to_num(value, nan=np.pi) * weight, starts) if len(value) else value
    series = pd.DataFrame({"run": run[starts], "n": sizes, "digest": np.round(digest, 9), "key": key_name})
    repeat = series.sort_values("key", kind="stable").duplicated(["run", "n", "digest"]).sort_index().to_numpy()
    return np.repeat(repeat, sizes)


def _group_reduce(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray, how: str) -> np.ndarray:
    """Per group (consecutive rows) sum or max of `values`, repeated onto the group's rows."""
    ufunc = np.add if how == "sum" else np.maximum
    return np.repeat(ufunc.reduceat(values, starts), sizes) if len(values) else values


def _transform(x: np.ndarray, starts: np.ndarray, sizes: np.ndarray, share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """asinh(x / typical), typical = the series' mean |x|: like a log ratio above the typical
    magnitude (a time or a norm that doubles moves by about log 2), linear near zero, so a bounded
    score or a loss near zero does not explode the way its log would. A share of the batch (`share`
    rows: SHARE_KEYS) has a typical magnitude of at least SHARE_SCALE: 0.2 of responses cut at the
    length limit is a lot whatever the run's usual 0.01, and 0.01 against 0.002 is nothing, so its
    ratios do not count below that. Returns it and `typical`."""
    finite = np.isfinite(x)
    ax = np.where(finite, np.abs(x), 0.0)
    count = np.maximum(_group_reduce(finite.astype(np.int64), starts, sizes, "sum"), 1)
    typical = _group_reduce(ax, starts, sizes, "sum") / count
    typical = np.maximum(typical, 1e-6 * _group_reduce(ax, starts, sizes, "max") + 1e-12)
    typical = np.where(share, np.maximum(typical, SHARE_SCALE), typical)
    return np.where(finite, np.arcsinh(np.where(finite, x, 0.0) / typical), np.nan), typical


def _group_quantiles_of(values: np.ndarray, group: np.ndarray, starts: np.ndarray, qs) -> list[np.ndarray]:
    """Per group, the quantiles `qs` of its finite non-negative values (rows sorted by group)."""
    ok = np.isfinite(values) & (values >= 0)
    g, v = group[ok].astype(np.int64), values[ok]
    # one sort: the group number above the value squeezed into [0, 1) in FRACTION_BITS bits keeps groups
    # apart and in order; fixed bits, so a group's quantiles do not depend on how many groups share the array
    place = np.minimum(np.rint(v / (1.0 + v) * FRACTION_ONE), FRACTION_ONE - 1).astype(np.int64)
    ordered = np.sort((g << FRACTION_BITS) | place)
    frac = (ordered & (FRACTION_ONE - 1)) / FRACTION_ONE
    return _group_quantiles(frac / (1.0 - frac), ordered >> FRACTION_BITS, len(starts), qs)


def _noise(y: np.ndarray, group: np.ndarray, starts: np.ndarray, sizes: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Noise level of each group from its step-to-step changes: the larger of the median-based and
    the tail-quantile-based estimate (both equal the standard deviation for Gaussian noise), floored.

    Changes barely see slow trends and level shifts; the tail estimate keeps heavy-tailed signals
    (pre-clip gradient norms, losses near zero) from scoring their ordinary swings as anomalies.
    Changes of zero are left out (a score that sits at 1 would have no noise at all), except for a
    series that does not change on STILL_SHARE of its steps and is a share of the batch (`share`)
    or changed at most STILL_CHANGES times (left its value once and came back): there the changes
    are events (rollouts aborted where none ever are, a best score that sits at 1 dropping), not
    its noise.
    """
    d = np.abs(np.r_[np.nan, np.diff(y)])
    d[starts] = np.nan
    mid, tail = _group_quantiles_of(np.where(d > 1e-12, d, np.nan), group, starts, (0.5, TAIL_Q))
    sigma = np.fmax(mid * 1.4826, tail / TAIL_Z) / np.sqrt(2)
    sigma = np.where(np.isfinite(sigma), np.maximum(sigma, SCALE_FLOOR), SCALE_FLOOR)
    known = np.isfinite(d)
    with np.errstate(invalid="ignore"):
        unchanged = _group_reduce((known & (d <= 1e-12)).astype(np.int64), starts, sizes, "sum")[starts]
    count = _group_reduce(known.astype(np.int64), starts, sizes, "sum")[starts]
    still = unchanged >= STILL_SHARE * np.maximum(count, 1)
    # a share is news whenever it moves; any other series only when it left its value once (a few
    # scattered dips of a maximum that sits at the length limit are its texture)
    once = count - unchanged <= STILL_CHANGES
    sigma = np.where(still & (share[starts] | once), SCALE_FLOOR, sigma)
    return np.repeat(sigma, sizes)


def _group_quantiles(values: np.ndarray, group: np.ndarray, n_groups: int, qs) -> list[np.ndarray]:
    """Per group, the lower-interpolated quantiles `qs` of `values` (sorted by group, then value); NaN if empty."""
    counts = np.bincount(group, minlength=n_groups)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    out = []
    for q in qs:
        at = np.minimum(first + (q * np.maximum(counts - 1, 0)).astype(np.int64), max(len(values) - 1, 0))
        out.append(np.where(counts > 0, values[at], np.nan) if len(values) else np.full(n_groups, np.nan))
    return out


def _enough(clean: np.ndarray, finite: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """`clean`, except that a series left with fewer than MIN_SERIES // 2 clean rows keeps all its rows."""
    few = _group_reduce(clean.astype(np.int64), starts, sizes, "sum") < MIN_SERIES // 2
    return np.where(few, finite, clean)


def signal_z(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, step, key): the value, its baseline, z and the 3-step median of z.

    Columns: run_id, step, key, family, value, baseline (in the value's units), z, zs; baseline and z
    are NaN where the series is too short to have a baseline (fewer than MIN_SERIES values). A step
    redone after a resume keeps its last segment's value; a series that repeats another of its run
    value for value is left out. The timing of validation and checkpoint steps (their step time
    includes that work) and of the first WARMUP_STEPS steps of each resume segment is neither judged
    nor part of a baseline (the named channels still flag an extreme warm-up).
    Rows already in order of run, key (by name) and step are not sorted again.
    """
    cols = ["run_id", "step", "key", "family", "value", "baseline", "z", "zs"]
    if metrics.empty:
        return pd.DataFrame(columns=cols)
    run, runs = _codes(metrics["run_id"])
    key, keys = _codes(metrics["key"])
    # codes in name order: a run's series then lie in one order, and its sums add up alike, whichever runs share the chunk
    by_name = keys.sort_values()
    key, keys = by_name.get_indexer(keys)[key], by_name
    family = pd.Index(keys.map(family_of))
    step = metrics["step"].to_numpy(dtype=np.int64)
    segment = metrics["segment"].to_numpy(dtype=np.int64) if "segment" in metrics else np.zeros(len(step), np.int64)
    value = metrics["value"].to_numpy(dtype=float)
    # validation and checkpoint steps, told by their timers (which are not judged themselves)
    periodic_steps = np.unique(_step_code(run, step)[np.isin(key, np.flatnonzero(keys.isin(PERIODIC_KEYS)))])
    kept = family.notna()[key] & _final_timeline(run, step, key, segment)
    run, step, key, segment, value = run[kept], step[kept], key[kept], segment[kept], value[kept]
    order = _grouped(run, key, step)
    run, step, key, segment, value = run[order], step[order], key[order], segment[order], value[order]
    new = np.r_[True, (run[1:] != run[:-1]) | (key[1:] != key[:-1])]
    starts = np.flatnonzero(new)
    sizes = np.diff(np.r_[starts, len(run)])
    original = ~_copies(value, np.asarray(keys)[key[starts]], run, starts, sizes)
    run, step, key, segment, value, new = (a[original] for a in (run, step, key, segment, value, new))
    group = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    sizes = np.diff(np.r_[starts, len(run)])
    g0, g1 = group_bounds(group)
    r0 = group_bounds(run)[0]  # the sums behind the lines restart at each run (levels.LineSums)
    timing = (family == "timing")[key]
    # timing of validation/checkpoint steps, and of a resume segment's first steps (the first rows of
    # each stretch of one segment within a series), is out of the series altogether
    periodic = timing & np.isin(_step_code(run, step), periodic_steps)
    segment_start = new | np.r_[True, segment[1:] != segment[:-1]]
    since = np.arange(len(run)) - np.maximum.accumulate(np.where(segment_start, np.arange(len(run)), 0))
    warmup = timing & (since < WARMUP_STEPS) & (step >= 1)
    x = np.where(periodic | warmup, np.nan, value)
    share = np.asarray(keys.str.contains(SHARE_KEYS), dtype=bool)[key]
    y, typical = _transform(x, starts, sizes, share)
    negligible = _negligible_timers(run, key, keys, typical, len(runs))
    sigma = _noise(y, group, starts, sizes, share)
    finite = np.isfinite(y)
    # A row stays out of the baseline when it is far from the line through the rows before it, the
    # line through the rows after it, or the line that skips its nearest neighbours on both sides:
    # an anomalous stretch then can neither vouch for its own members nor pull the baseline of the
    # healthy rows on either side of it. Leaving a healthy row out costs little; keeping an
    # anomalous one in costs a lot.
    sums = LineSums(y, finite, g0, g1, r0)
    far = np.zeros(len(y), dtype=bool)
    for gap, side in ((0, "before"), (0, "after"), (FIRST_PASS_GAP, "both")):
        level, factor = local_line(y, finite, g0, g1, gap, side, sums)
        with np.errstate(invalid="ignore"):
            far |= np.abs(y - level) > MASK_Z * sigma * factor
        if side == "before":
            off_past = far.copy()  # far from its own past: what the past line below leaves out
    clean = _enough(finite & ~far, finite, starts, sizes)
    base, factor = local_line(y, clean, g0, g1, r0=r0)
    # once more without the rows that line still finds far (a cluster member the masks let through)
    with np.errstate(invalid="ignore"):
        clean &= ~(np.abs(y - base) > MASK_Z * sigma * factor)
    clean = _enough(clean, finite, starts, sizes)
    sums = LineSums(y, clean, g0, g1, r0)
    base, factor, slope = local_line(y, clean, g0, g1, sums=sums, slope=True)
    # The two-sided line straddles a lasting change of level: the healthy rows just before it would
    # look off against a line half on the new level. A row is as far off as the nearer of that line
    # and the line through its own past, which also keeps the rows after an episode from being judged
    # against it; the onset of a change is off against both. The past line leaves out only the rows
    # far from their own past (the healthy rows before a change are not), skips the two nearest rows
    # so that a stretch's first rows cannot excuse the next ones, and counts only where it is about
    # as well determined as the two-sided line: one stretched from a few distant rows excuses anything.
    # Nor does a past line steeper than the two-sided one excuse a row: a slow climb (a leak) moves
    # each step within the noise, so its own past follows it and would excuse its top; the healthy
    # rows before a change of level have a flat past and a two-sided line tilted by the change.
    past, past_factor, past_slope = local_line(y, finite & ~off_past, g0, g1, FIRST_PASS_GAP, "before", slope=True,
                                               r0=r0)
    with np.errstate(invalid="ignore"):
        use_past = (np.abs(y - past) / past_factor < np.abs(y - base) / factor) & (past_factor <= PAST_FACTOR)
        use_past &= np.abs(past_slope) <= np.abs(slope) + STEEPER * sigma
    base, factor = np.where(use_past, past, base), np.where(use_past, past_factor, factor)
    short = _group_reduce(finite.astype(np.int64), starts, sizes, "sum") < MIN_SERIES
    base = np.where(short, np.nan, base)
    with np.errstate(invalid="ignore"):
        z = np.clip((y - base) / (sigma * factor), -Z_CLIP, Z_CLIP)
    z = np.where(negligible & np.isfinite(z), 0.0, z)
    return pd.DataFrame({
        "run_id": pd.Categorical.from_codes(run, categories=runs),
        "step": step,
        "key": pd.Categorical.from_codes(key, categories=keys),
        "family": pd.Categorical.from_codes(pd.Index(FAMILY_NAMES).get_indexer(family)[key], categories=FAMILY_NAMES),
        "value": value, "baseline": np.sinh(base) * typical, "z": z, "zs": centred_median3(z, new, np.r_[new[1:], True]),
    })


def rows_of(steps: pd.DataFrame, z: pd.DataFrame) -> np.ndarray:
    """Position in `steps` of each row of `z` (by run_id and step), -1 where absent."""
    runs = pd.Index(pd.unique(steps["run_id"]))
    code_steps = _step_code(runs.get_indexer(steps["run_id"]).astype(np.int64), steps["step"].to_numpy(np.int64))
    cat = pd.Categorical(z["run_id"])
    z_run = np.r_[runs.get_indexer(cat.categories), -1][cat.codes].astype(np.int64)
    code_z = _step_code(z_run, z["step"].to_numpy(np.int64))
    order = np.argsort(code_steps, kind="stable")
    at = np.clip(np.searchsorted(code_steps[order], code_z), 0, max(len(order) - 1, 0))
    found = (z_run >= 0) & (code_steps[order][at] == code_z) if len(order) else np.zeros(len(code_z), bool)
    return np.where(found, order[at], -1)


SIGNAL_FEATURES = ("sig_top", "sig_second", "sig_peak", "sig_moved", "sig_energy")


def step_summary(row: np.ndarray, family: np.ndarray, z: np.ndarray, zs: np.ndarray, n: int) -> np.ndarray:
    """The SIGNAL_FEATURES of `n` steps from the rows of their keys (row = the step's position, -1 = none),
    plus the number of keys with a baseline and the code of the family with the largest 3-step |z|
    (-1: none moved); see `signal_features`."""
    ok = (row >= 0) & np.isfinite(z)
    row, family = row[ok], family[ok]
    az, azs = np.abs(z[ok]), np.abs(np.nan_to_num(zs[ok]))
    nf = len(FAMILY_NAMES)
    sustained, peak = np.zeros((n, nf)), np.zeros((n, nf))
    np.maximum.at(sustained, (row, family), azs)
    np.maximum.at(peak, (row, family), az)
    ordered = -np.sort(-sustained, axis=1)
    top_family = np.where(ordered[:, 0] > 0, sustained.argmax(axis=1), -1)
    judged = np.bincount(row, minlength=n)
    moved = np.bincount(row, weights=(azs > MOVED_Z).astype(float), minlength=n)
    energy = np.sqrt(np.bincount(row, weights=np.minimum(az, 10.0) ** 2, minlength=n) / np.maximum(judged, 1))
    return np.column_stack([ordered[:, 0], ordered[:, 1], peak.max(axis=1), moved, energy, judged, top_family])


def signal_features(z: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step of `steps` (run_id, step; index kept): the model's summary of every logged signal.

    Per family the largest |3-step z| of its keys (a sustained move); `sig_top` and `sig_second` are
    the largest two of those, whatever the families (so every anomaly shows in the same columns),
    `sig_peak` the largest one-step |z|, `sig_moved` the keys whose 3-step |z| is past MOVED_Z,
    `sig_energy` the root mean square of the clipped z over the step's keys, and `sig_keys` the
    number of keys with a baseline at the step (0: nothing to judge it by), `sig_family` the family
    behind `sig_top` (empty when nothing moved).
    """
    names = [*SIGNAL_FEATURES, "sig_keys", "sig_family"]
    if not len(z) or not len(steps):
        frame = pd.DataFrame(np.zeros((len(steps), len(names) - 1)), index=steps.index, columns=names[:-1])
        return frame.assign(sig_family="")
    row = rows_of(steps, z)
    family = pd.Categorical(z["family"], categories=FAMILY_NAMES).codes.astype(np.int64)
    out = step_summary(row, family, z["z"].to_numpy(dtype=float), z["zs"].to_numpy(dtype=float), len(steps))
    frame = pd.DataFrame(out[:, :-1], index=steps.index, columns=names[:-1])
    frame["sig_family"] = np.array([*FAMILY_NAMES, ""], dtype=object)[out[:, -1].astype(np.int64)]
    return frame


def run_slices(run_ids: pd.Series, chunk_rows: int = CHUNK_ROWS) -> list[slice | np.ndarray]:
    """Row positions of `run_ids` in groups of whole runs of about `chunk_rows` rows: slices when the
    rows are already grouped by run in code order (no copy of the order), positions otherwise."""
    run, _ = _codes(run_ids.reset_index(drop=True))
    grouped = bool(np.all(run[1:] >= run[:-1])) if len(run) else True
    order = None if grouped else np.argsort(run, kind="stable")
    ordered = run if grouped else run[order]
    bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    slices, first = [], 0
    for i in range(1, len(bounds)):
        if bounds[i] - bounds[first] >= chunk_rows or i == len(bounds) - 1:
            a, b = bounds[first], bounds[i]
            slices.append(slice(a, b) if grouped else order[a:b])
            first = i
    return [s for s in slices if (s.stop - s.start if isinstance(s, slice) else len(s))]


def signal_summary(metrics: pd.DataFrame, steps: pd.DataFrame, chunk_rows: int = CHUNK_ROWS,
                   keep_moved: bool = False):
    """`signal_features` of `steps` from their runs' step_metrics rows, whole runs of about `chunk_rows`
    rows at a time (a chunk's z-scores are dropped once summed up).

    With `keep_moved`, also returns the `signal_z` rows of the steps where some signal moved
    (`sig_top` past MOVED_Z): the only steps an `other` episode can peak at, which its explanation reads.
    """
    parts, kept = [], []
    for rows in run_slices(metrics["run_id"], chunk_rows):
        chunk = metrics.iloc[rows]
        mine = steps[steps["run_id"].isin(pd.unique(chunk["run_id"]))]
        z = signal_z(chunk)
        features = signal_features(z, mine)
        parts.append(features)
        if keep_moved:
            moved = np.r_[features["sig_top"].to_numpy() > MOVED_Z, False]  # the last: a row of no step
            kept.append(z[moved[rows_of(mine, z)]])
    empty = signal_z(metrics.iloc[:0])
    summary = pd.concat(parts) if parts else signal_features(empty, steps)
    summary = summary.reindex(steps.index).fillna({c: 0.0 for c in summary.columns if c != "sig_family"})
    summary = summary.fillna({"sig_family": ""})
    if not keep_moved:
        return summary
    return summary, (pd.concat(kept, ignore_index=True) if kept else empty)
