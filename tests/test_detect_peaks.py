"""Each episode explained at its peak: the step and value where its signal is most extreme, against the
run's own median, checked against the peak found in the fixture's own values."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pipeline.detect import score_frame
from pipeline.detect.peaks import move_phrase
from tests.detect_runs import make_run

# class -> (fixture column, the way it moves, extra factor at the planted peak)
PLANTED = {
    "grad_explosion": ("grad_norm", 1, 3.0),
    "gen_slowdown": ("gen", 1, 1.6),
    "kl_spike": ("ppo_kl", 1, 3.0),
    "entropy_collapse": ("entropy", -1, 0.5),
    "response_length_collapse": ("response_length_mean", -1, 0.5),
    "reward_collapse": ("reward_mean", -1, 0.5),
    "memory_pressure": ("mem_reserved_gb", 1, 1.05),
}
HEAD = re.compile(r"^(\S+) (-?[\d.]+(?:e[-+]\d+)?)(?: s| GB)? at step (\d+)")


def _run(cls: str, peak: int):
    """A run with an episode of `cls` at steps 40-46, its signal pushed further at `peak`."""
    phases, health = make_run(seed=11, episode=(cls, 40, 46))
    column, _, factor = PLANTED[cls]
    frame = health if column in health else phases
    frame.loc[frame.step == peak, column] *= factor
    if cls == "response_length_collapse":
        phases.loc[phases.step == peak, "gen"] *= factor
    return phases, health, frame


@pytest.mark.parametrize("cls", list(PLANTED))
def test_a_named_episode_is_explained_at_its_peak(cls):
    phases, health, frame = _run(cls, peak=44)
    result = score_frame(phases, health)
    flagged = result[result.is_anomaly & (result.anomaly_class == cls) & result.step.between(38, 48)]
    assert len(flagged) >= 5
    assert flagged["explanation"].nunique() == 1  # the report shows one sentence per episode
    column, direction, _ = PLANTED[cls]
    values = frame.set_index("step")[column]
    inside = values.loc[flagged["step"]]
    peak = int(inside.idxmax() if direction > 0 else inside.idxmin())
    median = values.loc[~values.index.isin(result.loc[result.is_anomaly, "step"])].median()
    text = flagged["explanation"].iloc[0]
    channel, value, step = HEAD.match(text).groups()
    assert (channel, int(step)) == (column, peak), text
    assert float(value) == pytest.approx(values.loc[peak], rel=5e-3)
    assert f"the run's median {median:.4g}" in text
    ratio = values.loc[peak] / median
    if cls in ("grad_explosion", "gen_slowdown"):
        assert float(re.search(r", ([\d.]+)x the run's median", text).group(1)) == pytest.approx(ratio, rel=5e-3)
    if cls in ("entropy_collapse", "response_length_collapse"):
        assert int(re.search(r", (\d+)% below the run's median", text).group(1)) == round(100 * (1 - ratio))


def test_a_step_without_a_channel_names_its_step():
    phases, health = make_run(seed=6, episode=("kl_spike", 60, 64))
    health.loc[health.step.between(65, 67), ["pg_loss", "has_nan"]] = [np.nan, True]
    result = score_frame(phases, health)
    nan = result[result.is_anomaly & (result.anomaly_class == "nan_loss")]
    assert set(nan["explanation"]) == {"step 65: non-finite values in 2 metric(s)"}


@pytest.mark.parametrize(("value", "reference", "ratio", "text"), [
    (41.3, 0.084, True, "492x the run's median 0.084"),
    (0.021, 0.35, True, "94% below the run's median 0.35"),
    (30.0, 21.5, True, "+40% on the run's median 21.5"),
    (0.062, 0.000197, False, "(the run's median 0.000197)"),
    (-0.2, 0.6, True, "(the run's median 0.6)"),
])
def test_a_move_against_the_median_is_worded_by_its_size(value, reference, ratio, text):
    """A multiple past 1.5x, a percentage below or within it, no ratio for signed quantities."""
    assert move_phrase(value, reference, "the run's median", ratio) == text


def test_peak_median_leaves_the_flagged_steps_out():
    """The run's median is over its unflagged steps: a long episode does not drag its own reference."""
    phases, health = make_run(seed=5, episode=("response_length_collapse", 41, 80))
    result = score_frame(phases, health)
    text = result.loc[result.is_anomaly, "explanation"].iloc[0]
    healthy = health.loc[~health.step.isin(result.loc[result.is_anomaly, "step"]), "response_length_mean"]
    assert f"the run's median {healthy.median():.4g}" in text
    assert f"the run's median {pd.Series(health['response_length_mean']).median():.4g}" not in text


@pytest.mark.parametrize("n", [1, 2])
def test_a_run_of_fewer_steps_than_the_settling_window_is_scored_alone(n):
    # a batch holding one run with one or two scored steps (analyze --run of a run that died at step 1)
    phases, health = make_run(n=n)
    result = score_frame(phases, health)
    assert list(result["step"]) == list(range(1, n + 1))
    assert not result["is_anomaly"].any()
