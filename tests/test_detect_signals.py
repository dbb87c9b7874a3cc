"""Every logged signal against its run's own baseline (pipeline/detect/signals.py), on hand-made series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.detect.signals import family_of, signal_features, signal_z


def long_rows(run_id: str, series: dict[str, np.ndarray], first_step: int = 1, segment: int = 0) -> pd.DataFrame:
    """step_metrics rows of one run: every series logged at consecutive steps from `first_step`."""
    parts = []
    for key, values in series.items():
        steps = np.arange(first_step, first_step + len(values))
        parts.append(pd.DataFrame({"run_id": run_id, "step": steps, "key": key, "value": values, "segment": segment}))
    return pd.concat(parts, ignore_index=True)


def z_of(frame: pd.DataFrame, key: str) -> pd.Series:
    """z of one key, indexed by step."""
    rows = frame[frame["key"] == key]
    return pd.Series(rows["z"].to_numpy(), index=rows["step"].to_numpy())


def test_keys_fall_into_families_and_settings_are_ignored():
    assert family_of("actor/grad_norm") == "policy"
    assert family_of("critic/score/mean") == "reward"
    assert family_of("critic/advantages/max") == "advantage"
    assert family_of("critic/vf_loss") == "critic"
    assert family_of("timing_per_token_ms/gen") == "timing"
    assert family_of("perf/cpu_memory_used_gb") == "memory"
    assert family_of("val-core/openai/gsm8k/acc/mean@1") == "validation"
    assert family_of("env/tool_success") == "misc"
    for setting in ("actor/lr", "critic/lr(1e-4)", "actor/kl_coef", "training/global_step", "training/epoch",
                    "timing_s/testing", "timing_s/save_checkpoint"):
        assert family_of(setting) is None, setting


def test_healthy_noise_stays_inside_its_own_scale():
    """Trends, a pre-clip gradient norm swinging several-fold, a signed loss near zero and a rounded
    fraction: almost no |z| past 5, and no 3-step median past 4."""
    rng = np.random.default_rng(0)
    n = 300
    f = np.arange(n) / n
    parts = []
    for r in range(8):
        parts.append(long_rows(f"run-{r}", {
            "timing_s/gen": 40 * (1 + 0.5 * f) * rng.lognormal(0, 0.05, n),
            "actor/grad_norm": 5 * rng.lognormal(0, 0.4, n),
            "actor/pg_loss": rng.normal(0, 0.02, n),
            "actor/pg_clipfrac": np.round(np.abs(rng.normal(0.002, 0.001, n)), 3),
            "critic/score/mean": np.clip(0.2 + 0.5 * (1 - np.exp(-4 * f)) + rng.normal(0, 0.02, n), 0, 1),
        }))
    z = signal_z(pd.concat(parts, ignore_index=True))
    assert (z["z"].abs() > 5).mean() < 0.002
    assert z["zs"].abs().max() < 4


def test_a_change_counts_in_units_of_the_signal_own_swings():
    """Doubling is far for a signal that moves 2% from step to step, ordinary for one that swings 1.5x."""
    rng = np.random.default_rng(1)
    quiet = 50 * rng.lognormal(0, 0.02, 120)
    noisy = 5 * rng.lognormal(0, 0.4, 120)
    quiet[60] *= 2
    noisy[60] *= 2
    z = signal_z(long_rows("r", {"timing_s/update_actor": quiet, "actor/grad_norm": noisy}))
    assert z_of(z, "timing_s/update_actor")[61] > 10
    assert abs(z_of(z, "actor/grad_norm")[61]) < 3


def test_a_lasting_change_flags_its_onset_not_the_steps_before_it():
    """A signal that steps up for good at step 61 (as real log 15's KL penalty did): the steps before
    stay quiet, the first steps of the new level stand out."""
    rng = np.random.default_rng(2)
    values = np.r_[0.5 * rng.lognormal(0, 0.03, 60), 2.0 * rng.lognormal(0, 0.03, 40)]
    z = z_of(signal_z(long_rows("r", {"actor/reward_kl_penalty": values})), "actor/reward_kl_penalty")
    assert z.loc[20:60].abs().max() < 3
    assert z.loc[61:63].min() > 5


def test_trouble_at_the_end_of_a_run_does_not_bend_the_baseline_before_it():
    """Memory pinned near the GPU's size for the last 7 steps before an OOM: only those steps are off."""
    rng = np.random.default_rng(3)
    values = np.r_[60 * rng.lognormal(0, 0.01, 41), np.full(7, 93.2)]
    z = z_of(signal_z(long_rows("r", {"perf/max_memory_reserved_gb": values})), "perf/max_memory_reserved_gb")
    assert z.loc[:41].abs().max() < 3
    assert z.loc[42:].min() > 5


def test_a_stretch_a_third_of_a_short_run_long_stands_out_whole():
    """Advantages collapsing to 7% for 8 of 26 steps: every one of the 8 is far, the rest are not."""
    rng = np.random.default_rng(4)
    values = 2.4 * rng.lognormal(0, 0.05, 26)
    values[7:15] *= 0.07
    z = z_of(signal_z(long_rows("r", {"critic/advantages/max": values})), "critic/advantages/max")
    assert z.loc[8:15].max() < -5
    assert z.drop(range(8, 16)).abs().max() < 3


def test_copies_are_dropped_and_a_resumed_step_keeps_its_last_value():
    rng = np.random.default_rng(5)
    score = rng.uniform(0.3, 0.6, 40)
    first = long_rows("r", {"critic/score/mean": score[:30], "critic/rewards/mean": score[:30]})
    # the run resumed from step 26: steps 26-30 were redone with other values
    redo = score.copy()
    redo[25:30] += 0.1
    second = long_rows("r", {"critic/score/mean": redo[25:], "critic/rewards/mean": redo[25:]}, first_step=26,
                       segment=1)
    z = signal_z(pd.concat([first, second], ignore_index=True))
    assert set(z["key"]) == {"critic/rewards/mean"}  # the copy that sorts first stays
    assert list(z["step"]) == list(range(1, 41))
    assert np.allclose(z["value"].to_numpy(), redo)


def test_warmup_and_validation_steps_carry_no_timing_z():
    """A resume segment's first two steps compile (3x slower), a validation step's timer includes the
    validation: neither is judged (nor widens the noise); a slow step in the middle is."""
    rng = np.random.default_rng(6)
    step_time = 100 * rng.lognormal(0, 0.02, 60)
    step_time[[0, 1, 30, 31]] *= 3  # segment 0 starts at step 1, segment 1 at step 31
    step_time[19] *= 2  # step 20 validates
    step_time[44] *= 2  # step 45: a slow step
    rows = pd.concat([long_rows("r", {"timing_s/step": step_time[:30]}),
                      long_rows("r", {"timing_s/step": step_time[30:]}, first_step=31, segment=1),
                      long_rows("r", {"timing_s/testing": np.array([55.0])}, first_step=20)], ignore_index=True)
    z = z_of(signal_z(rows), "timing_s/step")
    assert z.loc[[1, 2, 20, 31, 32]].isna().all()
    assert z.loc[45] > 10


def test_a_run_too_short_for_a_baseline_is_not_judged():
    rows = long_rows("short", {"timing_s/gen": np.array([10.0, 11, 30, 10, 10, 12, 11, 10])})
    z = signal_z(rows)
    assert z["z"].isna().all() and z["baseline"].isna().all()
    features = signal_features(z, rows[["run_id", "step"]].drop_duplicates().reset_index(drop=True))
    assert (features["sig_keys"] == 0).all() and (features["sig_top"] == 0).all()


def test_signal_features_sum_up_each_step_whatever_the_keys():
    z = pd.DataFrame({
        "run_id": ["a"] * 5 + ["b"],
        "step": [1, 1, 1, 1, 2, 1],
        "key": ["critic/vf_loss", "critic/grad_norm", "actor/entropy", "timing_s/gen", "timing_s/gen", "timing_s/gen"],
        "family": ["critic", "critic", "policy", "timing", "timing", "timing"],
        "z": [9.0, -5.0, 4.0, 1.0, np.nan, 2.0],
        "zs": [7.0, -4.5, 3.5, 0.5, np.nan, 1.0],
    })
    steps = pd.DataFrame({"run_id": ["a", "a", "b"], "step": [1, 2, 1]})
    f = signal_features(z, steps)
    first = f.iloc[0]
    assert first["sig_top"] == 7.0 and first["sig_second"] == 3.5  # critic, then policy: families, not keys
    assert first["sig_peak"] == 9.0 and first["sig_moved"] == 3 and first["sig_keys"] == 4
    assert first["sig_family"] == "critic"
    assert first["sig_energy"] == pytest.approx(np.sqrt((9**2 + 5**2 + 4**2 + 1) / 4))
    assert f.iloc[1]["sig_keys"] == 0 and f.iloc[1]["sig_family"] == ""  # only a key without a baseline
    assert f.iloc[2]["sig_top"] == 1.0 and f.iloc[2]["sig_family"] == "timing"


def test_a_one_step_spike_does_not_read_as_sustained_a_two_step_move_does():
    rng = np.random.default_rng(7)
    spike = 50 * rng.lognormal(0, 0.02, 80)
    spike[40] *= 3
    lasting = 50 * rng.lognormal(0, 0.02, 80)
    lasting[40:42] *= 3
    z = signal_z(long_rows("r", {"timing_s/update_actor": spike, "timing_s/old_log_prob": lasting}))
    one = z[z["key"] == "timing_s/update_actor"].set_index("step")
    two = z[z["key"] == "timing_s/old_log_prob"].set_index("step")
    assert one.loc[41, "z"] > 20 and one.loc[[40, 41, 42], "zs"].abs().max() < 3
    assert two.loc[[41, 42], "zs"].min() > 20


def test_a_share_of_the_batch_counts_by_its_size_not_its_ratio():
    """A quarter of the responses cut at the length limit for five steps, where a few percent are cut on
    some steps and none on most (as verl logs `response_length/clip_ratio`), is a move; a share of
    clipped tokens going from about 0.0005 to 0.002 (4x, but a fifth of a percent) is not."""
    rng = np.random.default_rng(3)
    n = 120
    cut = np.where(rng.random(n) < 0.3, np.round(rng.uniform(0, 0.04, n), 3), 0.0)
    cut[60:65] = 0.25
    clipped = np.round(np.abs(rng.normal(0.0005, 0.0003, n)), 4)
    clipped[60:65] = 0.002
    z = signal_z(long_rows("r", {"response_length/clip_ratio": cut, "actor/pg_clipfrac": clipped}))
    assert (z_of(z, "response_length/clip_ratio").loc[61:65] > 4).sum() >= 4
    assert z_of(z, "actor/pg_clipfrac").abs().max() < 3


def test_a_share_that_never_changes_makes_any_change_news():
    """Aborted rollouts at 10% for four steps in a run that never aborts one is a move, though the only
    changes of that series are the episode's own edges; a share that changes on a third of its steps
    keeps its own swings as its noise."""
    rng = np.random.default_rng(4)
    n = 120
    aborted = np.zeros(n)
    aborted[70:74] = 0.1
    clipped = np.where(rng.random(n) < 0.3, np.round(rng.uniform(0.05, 0.3, n), 3), 0.0)
    z = signal_z(long_rows("r", {"response/aborted_ratio": aborted, "critic/vf_clipfrac": clipped}))
    assert (z_of(z, "response/aborted_ratio").loc[71:74] > 4).all()
    assert z_of(z, "critic/vf_clipfrac").abs().max() < 4


def test_a_slow_climb_that_falls_back_is_off_at_its_top():
    """Host memory climbing 15% over 8 steps (about 2% a step, inside its 1-2% step-to-step swings),
    then back to its level: the top of the climb is off on two steps running (its own steep past
    does not excuse it), the steps around it are not."""
    rng = np.random.default_rng(7)
    values = 320 * rng.lognormal(0, 0.012, 80)
    values[40:48] *= 1 + 0.15 * np.arange(1, 9) / 8
    z = signal_z(long_rows("r", {"perf/cpu_memory_used_gb": values}))
    zs = pd.Series(z["zs"].to_numpy(), index=z["step"].to_numpy())
    assert zs.loc[47:48].min() > 3
    assert zs.drop(range(41, 50)).abs().max() < 3


def test_any_series_that_never_changes_makes_any_change_news():
    """The best score of the batch sits at 1.0 on every step but six at 0.3 (a kind no rule names): a
    move on each of the six, though its only changes are the episode's edges. The longest response
    sitting at the length limit but for four scattered two-step dips to 80%: those dips are its
    texture, not news."""
    best = np.ones(120)
    best[60:66] = 0.3
    longest = np.full(120, 4096.0)
    for at in (10, 40, 75, 100):
        longest[at:at + 2] = 3300.0
    z = signal_z(long_rows("r", {"critic/score/max": best, "response_length/max": longest}))
    best_zs = z[z["key"] == "critic/score/max"].set_index("step")["zs"]
    assert (best_zs.loc[61:66] < -5).all()
    assert best_zs.drop(range(60, 68)).abs().max() < 3
    assert z[z["key"] == "response_length/max"]["zs"].abs().max() < 3
