"""Per-step features: each metric against the run's own baseline (and the fleet's, when given).

A run's baseline at a step is the least-squares line through the nearest clean steps on both
sides (the step itself excluded), or the mean of the clean steps before it, whichever says the
step is further off; "clean" excludes steps found anomalous in an earlier pass. z-scores are in
units of the run's noise, estimated from step-to-step differences. All of it is vectorised over
the whole fleet: numpy cumulative sums and pandas rolling medians over windows cut at the runs'
edges (`RunWindows`), no per-step or per-run Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.indexers import BaseIndexer

from pipeline.detect.levels import HALF_WINDOW, MIN_PERIODS, centred_median3, group_bounds, local_level
from pipeline.detect.signals import signal_summary

# Channels that are positive and multiplicative by nature: compared in log space, so the
# residual is a log-ratio and `<name>_ratio` is "x times the run's baseline".
LOG_CHANNELS = (
    "gen",
    "old_log_prob",
    "ref",
    "values",
    "update_actor",
    "update_critic",
    "update_weights",
    "step_time",
    "throughput",
    "grad_norm",
    "entropy",
    "response_length_mean",
    "mem_allocated_gb",
    "mem_reserved_gb",
)
# Channels that can be zero or negative: compared on a signed-log scale (ppo_kl, pg_loss)
# or linearly (reward, clip fraction, memory share).
ASINH_CHANNELS = ("ppo_kl", "pg_loss")
# Smallest "typical magnitude" of a signed-log channel: below it the transform is linear, so
# rounding (v0.4 prints 3 decimals) and noise around zero do not look like jumps.
ASINH_FLOOR = {"ppo_kl": 1e-3, "pg_loss": 1e-2}
LINEAR_CHANNELS = ("reward_mean", "pg_clipfrac", "mem_fraction")
CHANNELS = LOG_CHANNELS + ASINH_CHANNELS + LINEAR_CHANNELS
FALLING = ("entropy", "response_length_mean", "reward_mean")  # anomalous when they drop
TIMING = ("gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "update_weights",
          "step_time", "throughput")
WARMUP_STEPS = 2
# a warm-up step's phase time still counts when this far from the run's baseline (robust z) and this many
# times it: the first step after a resume routinely takes a few times its phase's usual time
WARMUP_EXTREME_Z = 12.0
WARMUP_EXTREME_RATIO = 5.0

PHASE_TIMES = ("gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "update_weights")
SHARES = ("share_gen", "share_old_log_prob", "share_update_actor")

# Smallest robust scale per channel (in the channel's transformed units): a run whose metric is
# nearly constant would otherwise turn a 1% wobble into a huge z-score.
SCALE_FLOOR = {c: 0.02 for c in LOG_CHANNELS} | {
    "ppo_kl": 0.3,
    "pg_loss": 0.3,
    "reward_mean": 0.01,
    "pg_clipfrac": 0.002,
    "mem_fraction": 0.005,
}

# A step this far from the mean of the steps before it (in transformed units: 1.5x for log
# channels) stays out of the baselines even when its neighbours agree with it, so a regime that
# persists to the end of a run (a collapse) does not become its own baseline.
SHIFT = {c: float(np.log(1.5)) for c in LOG_CHANNELS} | {
    "ppo_kl": 1.0,
    "pg_loss": 1.0,
    "reward_mean": 0.1,
    "pg_clipfrac": 0.05,
    "mem_fraction": 0.05,
}

MASK_Z = 2.5  # |z| above which a step is kept out of the next pass's baseline
# The noise level also covers this quantile of |step-to-step change| (TAIL_Z: its value for unit
# Gaussian noise); robust to a quarter of the changes being an episode's edges.
TAIL_Q, TAIL_Z = 0.75, 1.1503
# Channels spiky by nature (a pre-clip gradient norm, a loss or KL estimate from one batch) cover the
# 90% quantile: their routine one-step spikes are their noise, not an explosion.
SPIKY = ("grad_norm", "pg_loss", "ppo_kl")
SPIKY_TAIL = (0.9, 1.6449)
# Their swings also change over a run (the official verl example runs' pre-clip gradient norm swings
# 2-9x from step to step over their first hundred steps, by a few percent later on): their noise is at
# least the median change among the LOCAL_NOISE_WINDOW steps around a step, when at least
# LOCAL_NOISE_MIN of them changed (a median: an episode shorter than half the window does not raise
# its own noise).
LOCAL_NOISE_WINDOW, LOCAL_NOISE_MIN = 51, 20
PASSES = 4


def merge_steps(phases: pd.DataFrame, health: pd.DataFrame) -> pd.DataFrame:
    """Join step_phases and step_health on (run_id, step); a frame without run_id is one run."""
    phases = phases.copy()
    health = health.copy()
    for frame in (phases, health):
        if "run_id" not in frame.columns:
            frame["run_id"] = "run"
    drop = [c for c in health.columns if c in phases.columns and c not in ("run_id", "step")]
    df = phases.merge(health.drop(columns=drop), on=["run_id", "step"], how="left")
    return df.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)


def _warmup_rows(df: pd.DataFrame) -> np.ndarray:
    """Rows in the first WARMUP_STEPS training steps (step >= 1) of their run's resume segment, and
    validation's step 0."""
    segment = df["segment"] if "segment" in df else pd.Series(0, index=df.index)
    training = df["step"].to_numpy() >= 1
    position = np.full(len(df), -1)
    position[training] = df[training].groupby([df["run_id"][training], segment[training]], sort=False).cumcount()
    return position < WARMUP_STEPS


def _reward_column(df: pd.DataFrame) -> pd.Series:
    """reward_mean where logged, else score_mean (GRPO logs only the score)."""
    reward = df["reward_mean"] if "reward_mean" in df else pd.Series(np.nan, index=df.index)
    if "score_mean" in df:
        reward = reward.fillna(df["score_mean"])
    return reward.astype(float)


def _transform(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """Channels on the scale where a deviation is additive (log, signed log, linear), and the
    per-row scale of each signed-log channel."""
    out, typicals = {}, {}
    for c in LOG_CHANNELS:
        x = df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index)
        x = x.where(np.isfinite(x) & (x > 0))
        out[c] = np.log(x)
    for c in ASINH_CHANNELS:
        x = df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index)
        x = x.where(np.isfinite(x))
        # scale by the run's typical magnitude so the transform is log-like above it
        typical = x.abs().groupby(df["run_id"], sort=False).transform("median")
        typical = typical.clip(lower=ASINH_FLOOR[c]).fillna(ASINH_FLOOR[c])
        typicals[c] = typical
        out[c] = np.arcsinh(x / typical)
    for c in LINEAR_CHANNELS:
        x = _reward_column(df) if c == "reward_mean" else (
            df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index))
        out[c] = x.where(np.isfinite(x))
    return pd.DataFrame(out, index=df.index), typicals


class RunWindows(BaseIndexer):
    """Rolling windows from `before` rows before each row to `after` rows after it, cut at the edges of
    the row's run (`g0`, `g1`: levels.group_bounds; rows grouped by run): the bounds a groupby-rolling
    computes run by run in Python, as one array, so one pass of the rolling kernel does every run."""

    def get_window_bounds(self, num_values=0, min_periods=None, center=None, closed=None, step=None):
        """Start and end (exclusive) of each row's window."""
        i = np.arange(num_values, dtype=np.int64)
        return np.maximum(i - self.before, self.g0), np.minimum(i + self.after + 1, self.g1)


def run_rolling(frame, bounds: tuple[np.ndarray, np.ndarray], window: int, min_periods: int, center: bool = False):
    """`frame.groupby(run).rolling(window, min_periods, center)` in the frame's own row order, in one pass."""
    after = (window - 1) // 2 if center else 0
    g0, g1 = (np.asarray(b, dtype=np.int64) for b in bounds)
    return frame.rolling(RunWindows(g0=g0, g1=g1, before=window - 1 - after, after=after), min_periods=min_periods)


def _noise_scale(values: pd.DataFrame, runs: pd.Series, bounds: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Noise level per run and channel from step-to-step differences, floored by SCALE_FLOOR.

    Differences barely see level shifts and slow trends, so even a run that is half anomalous
    gets its true noise; the median is over non-zero differences because a plain one collapses
    to 0 when most values sit on one point (a score clipped at 1, three-decimal rounding). The
    level is the larger of the median-based and the TAIL_Q-quantile-based estimate (equal for
    Gaussian noise), so a channel that swings several-fold from step to step (a pre-clip gradient
    norm) is judged against its swings, not its typical step. A spiky channel's noise is also at
    least its local one (LOCAL_NOISE_WINDOW), since its swings change over the run.
    """
    diff = values.groupby(runs, sort=False).diff().abs()
    moved = diff.where(diff > 1e-12).groupby(runs, sort=False)
    mid = moved.transform("median") * 1.4826
    tail = pd.concat([moved[[c for c in values.columns if (c in SPIKY) == spiky]].quantile(q).div(z)
                      for spiky, (q, z) in ((False, (TAIL_Q, TAIL_Z)), (True, SPIKY_TAIL))], axis=1)
    tail = tail[values.columns].reindex(runs.to_numpy()).set_axis(values.index)
    spread = np.fmax(mid, tail) / np.sqrt(2)
    spiky = [c for c in values.columns if c in SPIKY]
    if spiky:
        local = run_rolling(diff[spiky].where(diff[spiky] > 1e-12), bounds, LOCAL_NOISE_WINDOW, LOCAL_NOISE_MIN,
                            center=True).median() * 1.4826 / np.sqrt(2)
        spread[spiky] = np.fmax(spread[spiky], local)
    floor = pd.Series({c: SCALE_FLOOR[c] for c in values.columns})
    return spread.clip(lower=floor, axis=1).fillna(floor)


def _trailing_median(values: pd.DataFrame, bounds: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Median of the HALF_WINDOW rows before each row of the same run (NaN with fewer than MIN_PERIODS)."""
    rolled = run_rolling(values, bounds, HALF_WINDOW, MIN_PERIODS).median().shift(1).to_numpy()
    return np.where((np.arange(len(values)) == bounds[0])[:, None], np.nan, rolled)


def _run_line(x: np.ndarray, clean: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
              position: np.ndarray) -> np.ndarray:
    """Least-squares line of each run and channel through its clean rows, read at every row."""
    pos = position.astype(float)[:, None]
    w = clean.astype(float)
    y = np.where(clean, x, 0.0)
    c0, c1, c2, t0, t1 = (np.add.reduceat(a, starts, axis=0) for a in (w, w * pos, w * pos * pos, y, y * pos))
    with np.errstate(invalid="ignore", divide="ignore"):
        xbar, ybar = c1 / c0, t0 / c0
        sxx = c2 - c1 * xbar
        slope = np.where(sxx > 1e-9, (t1 - c1 * ybar) / sxx, 0.0)
        intercept = np.where(c0 >= MIN_PERIODS, ybar - slope * xbar, np.nan)
    return np.repeat(intercept, sizes, axis=0) + np.repeat(slope, sizes, axis=0) * pos


def _baseline(values: pd.DataFrame, runs: pd.Series):
    """Baseline, residual and robust z of every channel against the run's own neighbourhood.

    A trailing rolling median first finds the steps that jump away from what came before them;
    passes of the local level over the remaining (clean) steps then refine the set of excluded
    steps, so neither an episode nor the current step is part of its own baseline.
    """
    names = list(values.columns)
    x = values.to_numpy(dtype=float)
    g0, g1 = group_bounds(runs)
    scale = _noise_scale(values, runs, (g0, g1)).to_numpy()
    before = _trailing_median(values, (g0, g1))
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore"):
        # the past is the reference: a run's first steps are not judged by what comes after them
        mask = np.abs(x - before) > MASK_Z * scale
    falling = np.array([c in FALLING for c in names])
    shift = np.array([SHIFT[c] for c in names])
    position = np.arange(len(x)) - g0
    starts = np.flatnonzero(position == 0)
    sizes = np.diff(np.r_[starts, len(x)])
    limit = np.maximum(shift, MASK_Z * scale)
    with_history = (position >= HALF_WINDOW)[:, None]
    two, trail = np.empty_like(x), np.empty_like(x)
    far = np.zeros_like(finite)
    for k in range(PASSES):
        clean = ~mask & finite
        if k < 2:
            # a long episode (a collapse lasting a sixth of the run) is far from the run's own
            # line even where its neighbours agree with it; the line is refitted without the far
            # rows, so the episode cannot tilt it toward itself
            far[:] = False
            for _ in range(2):
                far = np.abs(x - _run_line(x, clean & ~far, starts, sizes, position)) > limit
            far &= with_history
        clean &= ~far
        for j in range(x.shape[1]):
            two[:, j], trail[:, j] = local_level(x[:, j], clean[:, j], g0, g1)
            gaps = np.isnan(two[:, j]) & finite[:, j]
            if gaps.any():
                # too much is masked to fit a line: the line through every step stands in
                two[gaps, j] = local_level(x[:, j], finite[:, j], g0, g1)[0][gaps]
        resid_two, resid_trail = x - two, x - trail
        z_two, z_trail = resid_two / scale, resid_trail / scale
        with np.errstate(invalid="ignore"):
            # recomputed, not accumulated, so a step masked by a lagging first guess comes back
            shifted = (np.abs(z_trail) > MASK_Z) & (np.abs(resid_trail) > shift)
            mask = (np.abs(z_two) > MASK_Z) | shifted
    with np.errstate(invalid="ignore"):
        use_trail = np.abs(z_trail) > np.abs(z_two)
        # a collapse is a drop against the past: a falling channel is only as low as both
        # baselines agree, and without history it is not low at all
        z_trail0 = np.nan_to_num(z_trail, nan=0.0)
        use_trail = np.where(falling, z_trail0 > z_two, use_trail)
        z = np.where(use_trail, z_trail, z_two)
        z = np.where(falling, np.maximum(z_two, z_trail0), z)
        resid = np.where(use_trail & ~np.isnan(z_trail), resid_trail, resid_two)
    frame = lambda a: pd.DataFrame(a, index=values.index, columns=names)  # noqa: E731
    return frame(x - resid), frame(resid), frame(z)


def _diff(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Step-over-step change within each run (NaN on a run's first row)."""
    d = np.r_[np.nan, np.diff(x)]
    d[first] = np.nan
    return d


def _nonfinite_count(df: pd.DataFrame) -> pd.Series:
    """NaN/inf among the values a healthy step always logs, plus the derive layer's has_nan flag."""
    cols = [c for c in ("pg_loss", "grad_norm", "ppo_kl", "entropy", "vf_loss", "kl_loss") if c in df]
    count = pd.Series(0, index=df.index, dtype="int64")
    for c in cols:
        x = df[c].astype(float)
        # a metric the run never logs is NaN everywhere: only NaN where the run has values counts
        logged = x.notna().groupby(df["run_id"], sort=False).transform("any")
        count += (~np.isfinite(x.fillna(0.0)) | (x.isna() & logged)).astype("int64")
    if "has_nan" in df:
        count += df["has_nan"].fillna(False).astype(bool).astype("int64")
    return count


def build_features(
    phases: pd.DataFrame, health: pd.DataFrame, fleet_baseline: pd.DataFrame | None = None,
    metrics: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per (run_id, step) of `phases` with the detector's features.

    Columns: `z_<channel>` (robust z against the run's baseline, see the module docstring),
    `<channel>_ratio` (x / baseline for log channels), `base_<channel>` (the baseline in the
    metric's units), `zs_<channel>` (3-step centred median of z), `nonfinite`,
    `mem_fraction`, `pg_loss_jump10`, `reward_mean_drop`, `ppo_kl`, `d_ppo_kl` (step-over-step change),
    `pg_clipfrac`, share deltas, `periodic` (a testing or checkpoint step), and `<phase>_vs_fleet`
    when `fleet_baseline` (index run_id, one column per phase: the config group's median) is given,
    and the `sig_*` summary of every logged signal (`signals.signal_features`) when `metrics`
    (step_metrics rows of the same runs) is given.
    """
    df = merge_steps(phases, health)
    out = features_of(df, fleet_baseline)
    if metrics is None:
        return out
    return pd.concat([out, signal_summary(metrics, out[["run_id", "step"]])], axis=1)


def features_of(df: pd.DataFrame, fleet_baseline: pd.DataFrame | None = None,
                signals: pd.DataFrame | None = None) -> pd.DataFrame:
    """build_features on an already merged frame (`merge_steps`), same index, without the signals'
    summary unless `signals` (its `signal_summary`, same index) is given."""
    runs = df["run_id"]
    values, typicals = _transform(df)

    base, resid, z = _baseline(values, runs)
    # verl's first steps of a run, and of each resumed segment, compile kernels and warm caches: their
    # phase times are judged only when extreme
    timing = [c for c in TIMING if c in z.columns]
    quiet = pd.DataFrame(False, index=z.index, columns=timing)
    with np.errstate(invalid="ignore", over="ignore"):
        extreme = (z[timing].abs() >= WARMUP_EXTREME_Z) & (np.exp(resid[timing].abs()) >= WARMUP_EXTREME_RATIO)
    quiet.loc[_warmup_rows(df)] = ~extreme
    z[timing] = z[timing].mask(quiet, 0.0)
    resid[timing] = resid[timing].mask(quiet, 0.0)
    position = df.groupby("run_id", sort=False).cumcount().to_numpy()

    out = {"run_id": runs.to_numpy(), "step": df["step"].to_numpy(dtype="int64")}
    for c in CHANNELS:
        out[f"z_{c}"] = z[c].to_numpy()
        if c in LOG_CHANNELS:
            out[f"base_{c}"] = np.exp(base[c].to_numpy())
        elif c in ASINH_CHANNELS:
            out[f"base_{c}"] = np.sinh(base[c].to_numpy()) * typicals[c].to_numpy()
        else:
            out[f"base_{c}"] = base[c].to_numpy()
    for c in LOG_CHANNELS:
        out[f"{c}_ratio"] = np.exp(resid[c].to_numpy())
    first = position == 0
    last = np.r_[position[1:] == 0, True]
    for c in CHANNELS:
        out[f"zs_{c}"] = centred_median3(out[f"z_{c}"], first, last)
    for c in LOG_CHANNELS:
        out[f"{c}_ratio_s"] = centred_median3(out[f"{c}_ratio"], first, last)
    out = pd.DataFrame(out, index=df.index)

    out["nonfinite"] = _nonfinite_count(df)
    out["ppo_kl"] = df["ppo_kl"].astype(float) if "ppo_kl" in df else np.nan
    out["d_ppo_kl"] = _diff(out["ppo_kl"].to_numpy(), first)
    out["pg_clipfrac"] = df["pg_clipfrac"].astype(float) if "pg_clipfrac" in df else np.nan
    mem_fraction = df["mem_fraction"].astype(float) if "mem_fraction" in df else pd.Series(np.nan, index=df.index)
    if "mem_total_gb" in df:
        for used in ("mem_reserved_gb", "mem_allocated_gb"):
            if used in df:
                mem_fraction = mem_fraction.fillna(df[used] / df["mem_total_gb"])
    out["mem_fraction"] = mem_fraction
    loss = df["pg_loss"].astype(float).abs() if "pg_loss" in df else pd.Series(np.nan, index=df.index)
    loss_smooth = run_rolling(loss, group_bounds(runs), 3, 1).mean()
    out["pg_loss_jump10"] = loss_smooth / loss_smooth.groupby(runs, sort=False).shift(10)
    reward = _reward_column(df)
    reward_base = base["reward_mean"]
    out["reward_mean"] = reward
    out["reward_mean_drop"] = (reward_base - reward) / reward_base.abs().clip(lower=0.1)
    for s in SHARES:
        if s in df:
            share = df[s].astype(float)
            out[f"{s}_delta"] = share - share.groupby(runs, sort=False).transform("median")
        else:
            out[f"{s}_delta"] = np.nan
    periodic = pd.Series(False, index=df.index)
    for c in ("testing", "save_checkpoint"):
        if c in df:
            periodic |= df[c].notna()
    out["periodic"] = periodic
    # verl's step timer includes validation and checkpointing: the step's own time says nothing there
    for c in ("step_time", "throughput"):
        out.loc[periodic, [f"z_{c}", f"zs_{c}"]] = 0.0
    if signals is not None:
        out = pd.concat([out, signals], axis=1)
    if fleet_baseline is not None:
        for c in PHASE_TIMES + ("step_time",):
            if c in fleet_baseline.columns and c in df:
                ref = runs.map(fleet_baseline[c])
                vs_fleet = df[c].astype(float) / ref
                out[f"{c}_vs_fleet"] = vs_fleet.mask(quiet[c], 1.0) if c in quiet else vs_fleet
    return out


def group_medians(phases: pd.DataFrame, groups: pd.Series | None = None) -> pd.DataFrame:
    """Median phase times per config group (index: group key, plus '*' for the whole fleet).

    `groups`: each run's config group (index run_id), as run_baselines names it; a run without one is
    in the fleet's row only.
    """
    return group_table(run_medians(phases), groups)


def run_medians(phases: pd.DataFrame) -> pd.DataFrame:
    """Each run's median phase times (index run_id): what `group_table` needs of a run, whatever chunk it is read in."""
    cols = [c for c in PHASE_TIMES + ("step_time",) if c in phases]
    return phases.groupby("run_id")[cols].median()


def group_table(per_run: pd.DataFrame, groups: pd.Series | None = None) -> pd.DataFrame:
    """`group_medians` from the runs' own medians (`run_medians`)."""
    cols = list(per_run.columns)
    group = _group_of(groups, per_run.index)
    table = per_run[group.notna().to_numpy()].groupby(group.dropna().to_numpy())[cols].median()
    table.loc["*"] = per_run[cols].median()
    return table


def fleet_baseline_for(run_ids, groups: pd.Series | None, table: pd.DataFrame) -> pd.DataFrame:
    """The fleet baseline of each run (index run_id): its config group's medians, else the fleet's."""
    group = _group_of(groups, run_ids)
    keys = group.where(group.isin(table.index), "*")
    baseline = table.reindex(keys.to_numpy())
    baseline.index = group.index
    return baseline


def _group_of(groups: pd.Series | None, run_ids) -> pd.Series:
    """Each run's config group from `groups` (index run_id), None where it has none."""
    index = pd.Index(run_ids, name="run_id")
    if groups is None:
        return pd.Series(None, index=index, dtype=object)
    return groups.reindex(index).astype(object).where(lambda g: g.notna(), None)
