"""Per-step features: each metric against the run's own trailing baseline and the fleet baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd

# Channels that are positive and multiplicative by nature: compared in log space, so the
# residual is a log-ratio and `<name>_ratio` is "x times the run's median".
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
)
# Channels that can be zero or negative: compared on a signed-log scale (ppo_kl, pg_loss)
# or linearly (reward, clip fraction, memory share).
ASINH_CHANNELS = ("ppo_kl", "pg_loss")
LINEAR_CHANNELS = ("reward_mean", "pg_clipfrac", "mem_fraction")
CHANNELS = LOG_CHANNELS + ASINH_CHANNELS + LINEAR_CHANNELS

PHASE_TIMES = ("gen", "old_log_prob", "ref", "values", "update_actor", "update_critic", "update_weights")
SHARES = ("share_gen", "share_old_log_prob", "share_update_actor")

# Smallest robust scale per channel (in the channel's transformed units): a run whose metric is
# nearly constant would otherwise turn a 1% wobble into a huge z-score.
SCALE_FLOOR = {c: 0.02 for c in LOG_CHANNELS} | {
    "ppo_kl": 0.05,
    "pg_loss": 0.05,
    "reward_mean": 0.01,
    "pg_clipfrac": 0.002,
    "mem_fraction": 0.005,
}

WINDOW = 30  # steps of history in the rolling baseline
MIN_PERIODS = 5  # fewer clean steps than this: fall back to the run's clean median
MASK_Z = 3.0  # first-pass |z| above which a step is kept out of the second-pass baseline


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


def _reward_column(df: pd.DataFrame) -> pd.Series:
    """reward_mean where logged, else score_mean (GRPO logs only the score)."""
    reward = df["reward_mean"] if "reward_mean" in df else pd.Series(np.nan, index=df.index)
    if "score_mean" in df:
        reward = reward.fillna(df["score_mean"])
    return reward.astype(float)


def _transform(df: pd.DataFrame) -> pd.DataFrame:
    """Channels on the scale where a deviation is additive (log, signed log, linear)."""
    out = {}
    for c in LOG_CHANNELS:
        x = df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index)
        x = x.where(np.isfinite(x) & (x > 0))
        out[c] = np.log(x)
    for c in ASINH_CHANNELS:
        x = df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index)
        x = x.where(np.isfinite(x))
        # scale by the run's typical magnitude so the transform is log-like above it
        typical = x.abs().groupby(df["run_id"], sort=False).transform("median")
        typical = typical.where(typical > 0, 1e-6)
        out[c] = np.arcsinh(x / typical)
    for c in LINEAR_CHANNELS:
        x = _reward_column(df) if c == "reward_mean" else (
            df[c].astype(float) if c in df else pd.Series(np.nan, index=df.index))
        out[c] = x.where(np.isfinite(x))
    return pd.DataFrame(out, index=df.index)


def _trailing_median(values: pd.DataFrame, runs: pd.Series) -> pd.DataFrame:
    """Median of the previous WINDOW rows of the same run (current row excluded), else the run median."""
    grouped = values.groupby(runs, sort=False)
    rolled = grouped.rolling(WINDOW, min_periods=MIN_PERIODS).median()
    rolled = rolled.reset_index(level=0, drop=True).sort_index()
    trailing = rolled.groupby(runs, sort=False).shift(1)
    return trailing.fillna(grouped.transform("median"))


def _robust_z(values: pd.DataFrame, runs: pd.Series, mask: pd.DataFrame | None):
    """Baseline, residual and robust z of every channel; rows in `mask` stay out of the baseline."""
    clean = values if mask is None else values.mask(mask)
    base = _trailing_median(clean, runs)
    resid = values - base
    clean_resid = resid if mask is None else resid.mask(mask)
    mad = clean_resid.abs().groupby(runs, sort=False).transform("median") * 1.4826
    floor = pd.Series({c: SCALE_FLOOR[c] for c in values.columns})
    scale = mad.clip(lower=floor, axis=1).fillna(floor)
    return base, resid, resid / scale


def _nonfinite_count(df: pd.DataFrame) -> pd.Series:
    """NaN/inf among the values a healthy step always logs, plus the derive layer's has_nan flag."""
    cols = [c for c in ("pg_loss", "grad_norm", "ppo_kl", "entropy", "vf_loss", "kl_loss") if c in df]
    count = pd.Series(0, index=df.index, dtype="int64")
    for c in cols:
        x = df[c].astype(float)
        # a metric the run never logs is NaN everywhere: only NaN where the run has values counts
        logged = x.notna().groupby(df["run_id"], sort=False).transform("any")
        count += ((~np.isfinite(x.fillna(0.0)) | (x.isna() & logged))).astype("int64")
    if "has_nan" in df:
        count += df["has_nan"].fillna(False).astype(bool).astype("int64")
    return count


def build_features(
    phases: pd.DataFrame, health: pd.DataFrame, fleet_baseline: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per (run_id, step) of `phases` with the detector's features.

    Columns: `z_<channel>` (robust z against the run's trailing median, MAD scale, anomalous steps
    kept out of the baseline), `<channel>_ratio` (x / baseline for log channels), `d_<channel>`
    (step-over-step change), `zs_<channel>` (3-step centred mean of z), `nonfinite`,
    `mem_fraction`, `mem_headroom`, `pg_loss_jump10`, `reward_mean_drop`, `ppo_kl`, `d_ppo_kl`,
    `pg_clipfrac`, share deltas, `periodic` (a testing or checkpoint step), and `<phase>_vs_fleet`
    when `fleet_baseline` (index run_id, one column per phase: the config group's median) is given.
    """
    df = merge_steps(phases, health)
    runs = df["run_id"]
    values = _transform(df)

    _, _, z1 = _robust_z(values, runs, None)
    mask = z1.abs() > MASK_Z
    mask |= mask.groupby(runs, sort=False).shift(1, fill_value=False)  # the step after a jump too
    base, resid, z = _robust_z(values, runs, mask)

    out = pd.DataFrame({"run_id": runs, "step": df["step"].astype("int64")})
    for c in CHANNELS:
        out[f"z_{c}"] = z[c]
        out[f"base_{c}"] = base[c]
    for c in LOG_CHANNELS:
        out[f"{c}_ratio"] = np.exp(resid[c])
    for c in ("gen", "old_log_prob", "update_actor", "step_time", "ppo_kl", "grad_norm", "entropy",
              "response_length_mean", "reward_mean", "mem_allocated_gb"):
        out[f"d_{c}"] = values[c].groupby(runs, sort=False).diff()
    zcols = [f"z_{c}" for c in CHANNELS]
    smooth = out[zcols].groupby(runs, sort=False).rolling(3, center=True, min_periods=1).mean()
    smooth = smooth.reset_index(level=0, drop=True).sort_index()
    out[[f"zs_{c}" for c in CHANNELS]] = smooth.to_numpy()

    out["nonfinite"] = _nonfinite_count(df)
    out["ppo_kl"] = df["ppo_kl"].astype(float) if "ppo_kl" in df else np.nan
    out["d_ppo_kl"] = out["ppo_kl"].groupby(runs, sort=False).diff()
    out["pg_clipfrac"] = df["pg_clipfrac"].astype(float) if "pg_clipfrac" in df else np.nan
    mem_fraction = df["mem_fraction"].astype(float) if "mem_fraction" in df else pd.Series(np.nan, index=df.index)
    if "mem_total_gb" in df and "mem_allocated_gb" in df:
        mem_fraction = mem_fraction.fillna(df["mem_allocated_gb"] / df["mem_total_gb"])
    out["mem_fraction"] = mem_fraction
    out["mem_headroom"] = 1.0 - mem_fraction
    loss = df["pg_loss"].astype(float).abs() if "pg_loss" in df else pd.Series(np.nan, index=df.index)
    loss_smooth = loss.groupby(runs, sort=False).rolling(3, min_periods=1).mean().reset_index(level=0, drop=True)
    loss_smooth = loss_smooth.sort_index()
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
    if fleet_baseline is not None:
        for c in PHASE_TIMES + ("step_time",):
            if c in fleet_baseline.columns and c in df:
                ref = runs.map(fleet_baseline[c])
                out[f"{c}_vs_fleet"] = df[c].astype(float) / ref
    return out


def fleet_baseline_of(phases: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Median phase times of each config group, indexed by run_id (the fleet baseline)."""
    cols = [c for c in PHASE_TIMES + ("step_time",) if c in phases]
    per_run = phases.groupby("run_id")[cols].median()
    groups = config_groups(runs, per_run.index)
    per_run["group"] = groups
    group_median = per_run.groupby("group")[cols].transform("median")
    return group_median


CONFIG_KEYS = (
    "model_path",
    "strategy",
    "rollout_engine",
    "n_gpus_per_node",
    "nnodes",
    "rollout_n",
    "rollout_tp",
    "train_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "max_response_length",
)


def config_groups(runs: pd.DataFrame | None, run_ids) -> pd.Series:
    """A config-group key per run (the config fields of `runs` joined), '' when unknown."""
    index = pd.Index(run_ids, name="run_id")
    if runs is None or runs.empty:
        return pd.Series("", index=index)
    keys = [k for k in CONFIG_KEYS if k in runs.columns]
    table = runs.set_index("run_id").reindex(index)
    if not keys:
        return pd.Series("", index=index)
    return table[keys].astype(str).agg("|".join, axis=1)
