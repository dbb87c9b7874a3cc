"""The fleet's model of normal steps: `other` flags, their explanations, the gate on the rules, the files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipeline.detect import (
    AnomalyModelConfig,
    apply_rules,
    build_features,
    decide,
    fit_model,
    load_rules,
    score_frame,
)
from pipeline.detect.drivers import peak_drivers, signal_arrays
from pipeline.detect.model import MODEL_VERSION, FittedModel, judged_steps, model_matrix
from pipeline.detect.warehouse import discard_damaged_model, fit_anomaly_model, load_model, score_runs
from pipeline.lake import connect, write_run_table
from tests.detect_runs import extra_signals, make_run, to_metrics

N = 120
PLANTED = "run-3"  # its critic diverges at steps 60-66: vf_loss x12, grad norm x4


def _fleet(n_runs: int = 10, seed: int = 0, plant: bool = True, noisy: bool = False):
    """phases, health and step_metrics of `n_runs` hand-made runs; `noisy` gives them pre-clip gradient
    norms swinging several-fold and a signed policy loss well away from zero."""
    runs = [make_run(f"run-{i}", n=N, seed=seed * 100 + i) for i in range(n_runs)]
    phases = pd.concat([p for p, _ in runs], ignore_index=True)
    health = pd.concat([h for _, h in runs], ignore_index=True)
    extra = {f"run-{i}": extra_signals(N, seed * 100 + i) for i in range(n_runs)}
    if noisy:
        rng = np.random.default_rng(seed)
        health["grad_norm"] = 5 * rng.lognormal(0, 0.4, len(health))
        health["pg_loss"] = rng.normal(0, 0.03, len(health))
    if plant:
        at = slice(59, 66)
        extra[PLANTED]["critic/vf_loss"][at] *= 12
        extra[PLANTED]["critic/grad_norm"][at] *= 4
    return phases, health, to_metrics(phases, health, extra)


@pytest.fixture(scope="module")
def fitted():
    phases, health, metrics = _fleet()
    model = fit_model(build_features(phases, health, metrics=metrics), AnomalyModelConfig(n_estimators=100))
    return model, phases, health, metrics


def test_an_anomaly_no_rule_names_is_flagged_other_and_explained(fitted):
    model, phases, health, metrics = fitted
    result = score_frame(phases, health, model, metrics=metrics)
    run = result[result["run_id"] == PLANTED]
    episode = run[run["step"].between(60, 66)]
    assert (episode["is_anomaly"] & (episode["anomaly_class"] == "other")).sum() >= 5
    assert run.loc[~run["step"].between(58, 68), "is_anomaly"].sum() <= 1
    assert result.loc[result["run_id"] != PLANTED, "is_anomaly"].mean() < 0.01
    flagged = episode[episode["is_anomaly"]]
    text = flagged["explanation"].iloc[0]
    assert "critic/vf_loss" in text and "x the run's baseline" in text
    drivers = json.loads(flagged["drivers"].iloc[0])
    assert drivers[0]["family"] == "critic" and drivers[0]["contribution"] > 0
    vf = next(k for k in drivers[0]["keys"] if k["key"] == "critic/vf_loss")
    assert 6 < vf["value"] / vf["baseline"] < 25
    assert flagged["explanation"].nunique() == 1  # one explanation for the episode, from its peak
    assert run["score"].notna().all()  # every step is ranked


def test_an_other_episode_quotes_each_signal_at_its_extreme(fitted):
    """The families come from the model's peak step; each key is quoted where it is most extreme in the
    episode (here the planted critic loss: its highest value among the flagged steps, from the fixture)."""
    model, phases, health, metrics = fitted
    result = score_frame(phases, health, model, metrics=metrics)
    episode = result[(result["run_id"] == PLANTED) & result["is_anomaly"] & (result["anomaly_class"] == "other")]
    vf = metrics[(metrics["run_id"] == PLANTED) & (metrics["key"] == "critic/vf_loss")].set_index("step")["value"]
    peak = int(vf.loc[episode["step"]].idxmax())
    assert f"critic/vf_loss {vf.loc[peak]:.4g} at step {peak}, " in episode["explanation"].iloc[0]
    keys = [k for d in json.loads(episode["drivers"].iloc[0]) for k in d["keys"] if k["key"] == "critic/vf_loss"]
    assert keys[0]["step"] == peak and keys[0]["value"] == pytest.approx(vf.loc[peak])


class TopScore(FittedModel):
    """A model that scores a step by its largest family move (sig_top / 10)."""

    def __init__(self):
        super().__init__(forest=object(), features=("sig_top",), floor=np.zeros(1), gate=0.5, typical_score=0.4,
                         thresholds={})

    def scores(self, features: pd.DataFrame) -> np.ndarray:
        return features["sig_top"].to_numpy(dtype=float) / 10


def test_a_family_cites_its_most_moved_key_and_a_second_only_past_its_noise():
    rows = pd.DataFrame({"run_id": "r", "step": 5, "key": ["critic/vf_loss", "critic/grad_norm", "critic/values/mean"],
                         "family": "critic", "value": [1.2, 21.0, 3.0], "baseline": [0.1, 20.0, 1.0],
                         "z": [9.0, 0.5, 5.0], "zs": [9.0, 0.4, 4.0]})
    drivers, = peak_drivers(TopScore(), [signal_arrays(rows)])
    assert drivers[0]["family"] == "critic" and drivers[0]["contribution"] == pytest.approx(0.9)
    assert [k["key"] for k in drivers[0]["keys"]] == ["critic/vf_loss", "critic/values/mean"]
    rows.loc[2, "zs"] = 2.0  # within its noise: not cited beside the family's lead
    assert [k["key"] for k in peak_drivers(TopScore(), [signal_arrays(rows)])[0][0]["keys"]] == ["critic/vf_loss"]


def test_without_the_forest_the_anomaly_goes_unnoticed(fitted):
    """The ablation: the rules alone have nothing to say about the critic."""
    model, phases, health, metrics = fitted
    features = build_features(phases, health, metrics=metrics)
    alone = decide(features, model, use_model=False)
    assert not alone.loc[(alone["run_id"] == PLANTED) & alone["step"].between(60, 66), "is_anomaly"].any()


def test_healthy_runs_with_heavy_tailed_signals_stay_quiet():
    phases, health, metrics = _fleet(12, seed=3, plant=False, noisy=True)
    features = build_features(phases, health, metrics=metrics)
    model = fit_model(features, AnomalyModelConfig(n_estimators=100))
    assert decide(features, model)["is_anomaly"].mean() < 0.01


class FixedScores(FittedModel):
    """A model whose scores are given: the decision logic alone under test."""

    def __init__(self, scores, gate: float = 0.5):
        super().__init__(forest=object(), features=(), floor=np.zeros(0), gate=gate, typical_score=0.4,
                         thresholds={})
        self.fixed = np.asarray(scores, dtype=float)

    def scores(self, features: pd.DataFrame) -> np.ndarray:
        return self.fixed


def _steps(n: int = 40, **columns) -> pd.DataFrame:
    base = {"run_id": "r", "step": np.arange(1, n + 1), "sig_keys": 30.0, "sig_top": 1.0, "sig_family": "timing"}
    frame = pd.DataFrame(base)
    for name, (steps, value, rest) in columns.items():
        frame[name] = np.where(frame["step"].isin(steps), value, rest)
    return frame


def test_the_gate_cuts_a_weak_rule_hit_lets_a_strong_one_through_and_a_spike_is_noise():
    weak = _steps(z_gen=([25, 26, 27], 4.5, 0.0), zs_gen=([25, 26, 27], 3.6, 0.0), gen_ratio=([25, 26, 27], 1.6, 1.0))
    low, high = np.full(40, 0.3), np.where(weak["step"].isin([25, 26, 27]), 0.9, 0.3)
    assert not decide(weak, FixedScores(low))["is_anomaly"].any()
    flagged = decide(weak, FixedScores(high))
    assert list(flagged.loc[flagged["is_anomaly"], "step"]) == [25, 26, 27]
    assert set(flagged.loc[flagged["is_anomaly"], "anomaly_class"]) == {"gen_slowdown"}
    # a one-step blip at the threshold does not last, even where the model agrees
    blip = _steps(z_gen=([26], 4.5, 0.0), zs_gen=([26], 1.5, 0.0), gen_ratio=([26], 1.6, 1.0))
    assert not decide(blip, FixedScores(high))["is_anomaly"].any()
    # twice the threshold, two steps running, needs no model
    strong = _steps(z_gen=([26, 27], 9.0, 0.0), zs_gen=([26, 27], 9.0, 0.0), gen_ratio=([26, 27], 2.2, 1.0))
    assert decide(strong, FixedScores(low))["is_anomaly"].sum() >= 2
    # one step, however far, is the tail of the run's noise (its 3-step median is the neighbours')
    spike = _steps(z_gen=([26], 12.0, 0.0), zs_gen=([26], 0.0, 0.0), gen_ratio=([26], 3.0, 1.0))
    assert not decide(spike, FixedScores(high))["is_anomaly"].any()


def test_other_needs_two_unusual_steps_past_the_opening_and_a_signal_that_moved():
    moved = _steps(sig_top=([25, 26, 29], 6.0, 1.0))
    one = np.where(moved["step"] == 25, 0.9, 0.3)
    two = np.where(moved["step"].isin([25, 26]), 0.9, 0.3)
    assert not decide(moved, FixedScores(one))["is_anomaly"].any()
    result = decide(moved, FixedScores(two))
    assert list(result.loc[result["is_anomaly"], "step"]) == [25, 26]
    assert set(result.loc[result["is_anomaly"], "anomaly_class"]) == {"other"}
    still = _steps(sig_top=([25, 26], 2.0, 1.0))
    assert not decide(still, FixedScores(two))["is_anomaly"].any()
    # a run off from its first steps is in its opening transient for its first 10 steps: not other
    opening = _steps(sig_top=([2, 3, 4, 5], 9.0, 1.0))
    assert not decide(opening, FixedScores(np.where(opening["step"].isin([2, 3, 4, 5]), 0.9, 0.3)))["is_anomaly"].any()
    # a run that starts in line has no such excuse
    early = _steps(sig_top=([5, 6], 9.0, 1.0))
    flagged = decide(early, FixedScores(np.where(early["step"].isin([5, 6]), 0.9, 0.3)))
    assert list(flagged.loc[flagged["is_anomaly"], "step"]) == [5, 6]


@pytest.mark.parametrize("moved, unusual, flagged", [
    (range(1, 17), [13, 14, 15, 16], []),  # still settling past its first 10 steps: its opening
    (list(range(1, 5)) + list(range(13, 17)), [13, 14, 15, 16], [13, 14, 15, 16]),  # settled at step 5
    (range(1, 31), [24, 25], [24, 25]),  # never settles: judged past a tenth of its 200 steps
])
def test_the_opening_of_a_run_that_starts_off_lasts_until_it_settles(moved, unusual, flagged):
    """A PPO critic warms up from scratch over dozens of steps (the official verl example runs: their
    first ~30 of 435): the run's opening lasts until three steps in a row where nothing moved."""
    frame = _steps(200, sig_top=(list(moved), 9.0, 1.0))
    result = decide(frame, FixedScores(np.where(frame["step"].isin(unusual), 0.9, 0.3)))
    assert list(result.loc[result["is_anomaly"], "step"]) == flagged


@pytest.mark.parametrize("opening_z, later_z, flagged", [
    (9.0, 5.0, []),  # the run's opening fading: part of its transient
    (4.0, 9.0, [5, 6, 7]),  # further off than the run ever was at its start: something new
])
def test_a_transient_only_fades(opening_z, later_z, flagged):
    """A run off at its first three steps, then unusual again at steps 5-7 within its opening window:
    excused while no further off than at its start (a critic warming up fades), flagged when more."""
    frame = _steps(sig_top=([1, 2, 3], opening_z, 1.0))
    frame.loc[frame["step"].isin([4, 5, 6, 7]), "sig_top"] = [opening_z, later_z, later_z, later_z]
    result = decide(frame, FixedScores(np.where(frame["step"].isin([5, 6, 7]), 0.9, 0.3)))
    assert list(result.loc[result["is_anomaly"], "step"]) == flagged


def test_an_episode_from_step_3_is_not_the_opening():
    """In line at steps 1-2, then off from step 3 to 7: the run starts off because of the episode, which
    is no transient of the run's start (its first two steps were quiet)."""
    frame = _steps(sig_top=([3, 4, 5, 6, 7], 9.0, 1.0))
    result = decide(frame, FixedScores(np.where(frame["step"].isin([3, 4, 5, 6, 7]), 0.9, 0.3)))
    assert list(result.loc[result["is_anomaly"], "step"]) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("family, kept", [("timing", False), ("critic", True)])
def test_a_stretch_next_to_a_named_episode_on_its_signals_is_that_episode(family, kept):
    """A gen slowdown at steps 24-26, then two unusual steps no rule names: its run-down when timing
    moved, another anomaly when the critic did."""
    frame = _steps(z_gen=([24, 25, 26], 9.0, 0.0), zs_gen=([24, 25, 26], 8.0, 0.0),
                   gen_ratio=([24, 25, 26], 2.5, 1.0), sig_top=([24, 25, 26, 27, 28], 6.0, 1.0))
    frame["sig_family"] = np.where(frame["step"].isin([27, 28]), family, "timing")
    scores = np.where(frame["step"].isin([24, 25, 26, 27, 28]), 0.9, 0.3)
    result = decide(frame, FixedScores(scores))
    assert result.loc[result["step"].isin([24, 25, 26]), "anomaly_class"].eq("gen_slowdown").all()
    tail = result[result["step"].isin([27, 28])]
    assert tail["is_anomaly"].all() == kept
    if kept:
        assert set(tail["anomaly_class"]) == {"other"}


def test_a_fleet_without_signals_to_judge_leaves_the_rules_alone():
    phases, health = make_run(seed=5, episode=("kl_spike", 40, 44))
    features = build_features(phases, health)
    model = fit_model(features)
    assert model.forest is None
    result = decide(features, model)
    assert result["score"].isna().all()
    assert result.loc[result["step"].between(40, 44), "is_anomaly"].all()


def test_the_gate_is_passed_by_the_contamination_share_of_the_ordinary_steps(fitted):
    model, phases, health, metrics = fitted
    features = build_features(phases, health, metrics=metrics)
    hits, _ = apply_rules(features, load_rules())
    ordinary = features[judged_steps(features) & ~hits.to_numpy().any(axis=1)]
    scores = model.scores(ordinary)
    assert len(ordinary) > 1000 and abs((scores > model.gate).mean() - 0.1) < 0.002
    assert model.typical_score == pytest.approx(np.median(scores))
    # scikit-learn's own outlier call, of a forest fitted with the same settings on the same steps, is the gate's
    from sklearn.ensemble import IsolationForest

    config = AnomalyModelConfig()
    x = model_matrix(ordinary, model.features)
    assert np.array_equal(np.median(x, axis=0), model.floor)
    x = np.maximum(x, model.floor)
    forest = IsolationForest(n_estimators=config.n_estimators, contamination=config.contamination,
                             max_samples=config.max_samples, random_state=config.random_state).fit(x)
    assert np.array_equal(forest.predict(x) == -1, scores > model.gate)
    assert np.array_equal(-forest.score_samples(x), scores)


def test_model_input_counts_only_excess_deviation():
    frame = pd.DataFrame({"sig_top": [0.0, 2.0, np.inf], "sig_second": [np.nan, 1.0, 50.0]})
    x = model_matrix(frame, ("sig_top", "sig_second"), floor=np.log1p([1.0, 1.0]))
    assert np.allclose(x[0], np.log1p([1.0, 1.0]))  # quieter than the median counts as the median
    assert np.allclose(x[1], np.log1p([2.0, 1.0]))
    assert np.allclose(x[2], np.log1p([30.0, 30.0]))  # clipped


def test_fit_and_score_through_the_warehouse_read_every_logged_signal(tmp_path):
    phases, health, metrics = _fleet(8, seed=1)
    for table, frame in (("step_phases", phases), ("step_health", health), ("step_metrics", metrics)):
        for rid, part in frame.groupby("run_id"):
            write_run_table(tmp_path, table, rid, pa.Table.from_pandas(part.drop(columns="run_id"), preserve_index=False))
    info = fit_anomaly_model(tmp_path, AnomalyModelConfig(n_estimators=60))
    assert info.meta["features"] == ["sig_top", "sig_second", "sig_peak", "sig_moved", "sig_energy"]
    assert 0.3 < info.meta["typical_score"] < info.meta["gate_score"] < 1
    assert score_runs(tmp_path, [PLANTED, "run-4"]) >= 5
    rows = connect(tmp_path).execute("select * from step_anomalies where run_id = $r order by step", {"r": PLANTED}).df()
    other = rows[rows["is_anomaly"] & (rows["anomaly_class"] == "other")]
    assert other["step"].between(59, 67).all() and len(other) >= 5
    assert json.loads(other["drivers"].iloc[0])[0]["family"] == "critic"
    assert rows.loc[~rows["is_anomaly"], "drivers"].isna().all()
    # a model stored by another model version is discarded, to be fitted again
    assert load_model(tmp_path) is not None and not discard_damaged_model(tmp_path)
    meta = info.meta_path.read_text()
    info.meta_path.write_text(meta.replace(f'"model_version": "{MODEL_VERSION}"', '"model_version": "2.0"'))
    assert discard_damaged_model(tmp_path) and load_model(tmp_path) is None and not info.meta_path.exists()


def test_routine_gradient_spikes_are_not_an_explosion_a_sustained_rise_is():
    """A pre-clip gradient norm sitting near 2 with one-step spikes of 2-8x on about one step in eight
    (as the official verl example runs log it): no grad_explosion; the norm 20x for five steps: one."""
    rng = np.random.default_rng(8)
    phases, health = make_run(n=200, seed=9)
    grad = 2.0 * rng.lognormal(0, 0.05, 200)
    spikes = rng.random(200) < 0.12
    grad[spikes] *= rng.uniform(2, 8, spikes.sum())
    health["grad_norm"] = grad
    result = decide(build_features(phases, health), None)
    assert not (result["anomaly_class"] == "grad_explosion").any()
    health.loc[health["step"].between(120, 124), "grad_norm"] = 40.0
    result = decide(build_features(phases, health), None)
    exploded = result.loc[result["anomaly_class"] == "grad_explosion", "step"]
    assert exploded.between(118, 126).all() and exploded.between(120, 124).sum() >= 4


@pytest.mark.parametrize("seed", [0, 4])
def test_a_gradient_norm_swinging_widely_early_on_is_judged_by_its_swings_there(seed):
    """A pre-clip gradient norm near 2 that swings 2-10x from step to step over the first 60 steps and
    settles to 1.1x by step 200 (as the official verl example runs log it while the critic warms up),
    even where the forest's gate agrees everywhere: no grad_explosion (judged against the whole run's
    swings, its early ones were explosions). The norm 20x its level for five steps, early or late: one."""
    rng = np.random.default_rng(seed)
    phases, health = make_run(n=435, seed=seed)
    sigma = np.interp(np.arange(435), [0, 60, 200], [0.6, 0.6, 0.08])
    health["grad_norm"] = 2.0 * np.exp(np.abs(rng.normal(0, sigma)) * 1.5)

    def exploded(frame):
        features = build_features(phases, frame).assign(sig_keys=30.0)
        result = decide(features, FixedScores(np.full(len(features), 0.9)))
        return result.loc[result["anomaly_class"] == "grad_explosion", "step"]

    assert exploded(health).empty
    for at, value in ((40, 40.0), (300, 20.0)):
        planted = health.copy()
        planted.loc[planted["step"].between(at, at + 4), "grad_norm"] = value
        steps = exploded(planted)
        assert steps.between(at - 1, at + 5).all() and steps.between(at, at + 4).sum() == 5
