"""Detect layer on synthetic step_phases / step_health frames: features, rules, decisions, explanations, files."""

from __future__ import annotations

import json
import os

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lab.simulate.vocab import ANOMALY_CLASSES
from pipeline.detect import (
    AnomalyModelConfig,
    apply_rules,
    build_features,
    decide,
    episodes,
    fit_anomaly_model,
    fit_model,
    load_model,
    load_rules,
    score_frame,
    score_runs,
)
from pipeline.detect.features import run_rolling
from pipeline.detect.levels import group_bounds
from pipeline.detect.warehouse import read_table
from pipeline.lake import connect, write_run_table
from pipeline.quality import model_age_days
from tests.detect_runs import fleet, make_run


@pytest.fixture(scope="module")
def model():
    phases, health = fleet(8, seed=1, episodes={1: ("gen_slowdown", 30, 36), 4: ("kl_spike", 50, 53)})
    return fit_model(build_features(phases, health), AnomalyModelConfig(n_estimators=50))


def test_features_one_row_per_step_and_relative_to_the_run():
    phases, health = make_run(episode=("gen_slowdown", 40, 45))
    f = build_features(phases, health)
    assert len(f) == len(phases) and list(f["step"]) == list(phases["step"])
    assert f.loc[f.step.between(40, 45), "gen_ratio"].between(1.6, 2.6).all()
    assert f.loc[f.step.between(40, 45), "z_gen"].min() > 4
    healthy = f[~f.step.between(38, 47)]
    assert healthy["z_gen"].abs().median() < 1.5
    assert f["periodic"].sum() == 8  # testing or checkpoint steps


def test_healthy_runs_with_periodic_steps_are_not_flagged(model):
    phases, health = fleet(6, seed=7)
    result = decide(build_features(phases, health), model)
    assert result["is_anomaly"].mean() < 0.01


@pytest.mark.parametrize("cls", [c for c in ANOMALY_CLASSES])
def test_each_class_is_flagged_and_named(model, cls):
    phases, health = make_run(seed=3, episode=(cls, 40, 46))
    result = score_frame(phases, health, model)
    inside = result[result.step.between(40, 46)]
    outside = result[~result.step.between(38, 48)]
    assert inside["is_anomaly"].mean() >= 0.85, inside[["step", "is_anomaly", "anomaly_class"]]
    assert (inside.loc[inside.is_anomaly, "anomaly_class"] == cls).mean() >= 0.85
    assert outside["is_anomaly"].sum() <= 1
    flagged = inside[inside.is_anomaly]
    assert flagged["explanation"].str.len().gt(0).all()
    assert (flagged["episode_first_step"] <= flagged["step"]).all()


def test_explanation_names_the_feature_and_the_size():
    phases, health = make_run(seed=4, episode=("gen_slowdown", 40, 44))
    phases.loc[phases.step.between(40, 44), "gen"] *= 1.5  # 3x in all
    result = score_frame(phases, health)
    text = result.loc[result.step == 42, "explanation"].item()
    assert "gen" in text and "x the run's baseline" in text
    assert "throughput -" in text


def test_collapse_persisting_to_the_end_stays_flagged():
    phases, health = make_run(seed=5, episode=("response_length_collapse", 61, 80))
    result = score_frame(phases, health)
    tail = result[result.step >= 61]
    assert tail["is_anomaly"].mean() > 0.9
    assert set(tail.loc[tail.is_anomaly, "anomaly_class"]) == {"response_length_collapse"}


def test_adjacent_episodes_of_two_classes_are_two_episodes():
    phases, health = make_run(seed=6, episode=("kl_spike", 60, 64))
    nan = (health.step >= 65) & (health.step <= 67)
    health.loc[nan, "pg_loss"] = np.nan
    health.loc[nan, "has_nan"] = True
    result = score_frame(phases, health)
    flagged = result[result.is_anomaly & result.step.between(60, 67)]
    assert set(flagged.loc[flagged.step <= 64, "anomaly_class"]) == {"kl_spike"}
    assert set(flagged.loc[flagged.step >= 65, "anomaly_class"]) == {"nan_loss"}
    assert flagged["episode_id"].nunique() == 2


def test_episodes_split_by_run_and_class():
    runs = np.array(["a"] * 6 + ["b"] * 3)
    steps = np.array([1, 2, 3, 4, 5, 6, 1, 2, 3])
    flagged = np.array([0, 1, 1, 1, 0, 1, 1, 1, 0], dtype=bool)
    classes = np.array([None, "x", "x", "y", None, "x", "z", "z", None], dtype=object)
    ep, first, last = episodes(runs, steps, flagged, classes)
    assert list(ep) == [0, 1, 1, 2, 0, 3, 1, 1, 0]
    assert list(first[flagged]) == [2, 2, 4, 6, 1, 1]
    assert list(last[flagged]) == [3, 3, 4, 6, 2, 2]


def test_rules_are_data_and_cover_the_vocabulary(tmp_path):
    rules = load_rules()
    assert {r.anomaly_class for r in rules} == set(ANOMALY_CLASSES)
    seed = load_rules(seed_only=True)
    assert {r.name for r in seed} >= {"nan_or_inf", "kl_above_0.2_and_rising", "gpu_memory_above_95pct",
                                      "clip_fraction_above_0.25", "gen_time_doubles", "loss_jumps_1.5x_over_10_steps"}
    assert all(r.source for r in rules)
    bad = tmp_path / "rules.toml"
    bad.write_text('[[rule]]\nname="x"\nclass="kl_spike"\nwhen=[["ppo_kl", "~", 1]]\nmode="flag"\n')
    with pytest.raises(ValueError, match="operator"):
        load_rules(bad)


def test_seed_thresholds_fire_on_their_literal_values():
    f = pd.DataFrame({"ppo_kl": [0.1, 0.25, 0.3], "d_ppo_kl": [0.01, 0.05, -0.01], "mem_fraction": [0.9, 0.96, 0.5],
                      "pg_clipfrac": [0.1, 0.3, 0.0], "nonfinite": [0, 0, 2]})
    hits, strength = apply_rules(f, load_rules(seed_only=True))
    assert list(hits["kl_above_0.2_and_rising"]) == [False, True, False]
    assert list(hits["gpu_memory_above_95pct"]) == [False, True, False]
    assert list(hits["clip_fraction_above_0.25"]) == [False, True, False]
    assert list(hits["nan_or_inf"]) == [False, False, True]
    assert strength.loc[1, "kl_above_0.2_and_rising"] == pytest.approx(1.25)


def _write_warehouse(warehouse, phases, health):
    for rid, part in phases.groupby("run_id"):
        write_run_table(warehouse, "step_phases", rid, pa.Table.from_pandas(part.drop(columns="run_id"),
                                                                             preserve_index=False))
    for rid, part in health.groupby("run_id"):
        write_run_table(warehouse, "step_health", rid, pa.Table.from_pandas(part.drop(columns="run_id"),
                                                                             preserve_index=False))


def test_fit_and_score_through_the_warehouse(tmp_path):
    phases, health = fleet(5, seed=2, episodes={2: ("update_actor_slowdown", 20, 25)})
    _write_warehouse(tmp_path, phases, health)
    info = fit_anomaly_model(tmp_path, AnomalyModelConfig(n_estimators=30))
    assert info.path.exists() and info.meta_path.exists()
    meta = json.loads(info.meta_path.read_text())
    assert meta["training"]["n_runs"] == 5 and meta["training"]["n_steps"] == len(phases)
    assert meta["settings"]["n_estimators"] == 30 and meta["sklearn_version"]
    assert meta["features"] == list(info.features)
    assert load_model(tmp_path) is not None
    # the age the nightly schedule reads comes from the fit itself, not the file's modification time
    os.utime(info.meta_path, (0, 0))
    assert model_age_days(tmp_path) < 0.01

    flagged = score_runs(tmp_path, ["run-2", "run-3"])
    con = connect(tmp_path)
    rows = con.execute("select * from step_anomalies order by run_id, step").df()
    assert set(rows["run_id"]) == {"run-2", "run-3"} and len(rows) == 160
    assert flagged == int(rows["is_anomaly"].sum())
    ep = rows[(rows.run_id == "run-2") & rows.is_anomaly]
    assert ep["step"].between(18, 27).all() and set(ep["anomaly_class"]) == {"update_actor_slowdown"}
    assert rows.loc[~rows.is_anomaly, "episode_id"].isna().all()
    assert rows.loc[rows.is_anomaly, "rule_hits"].map(len).sum() > 0

    # rescoring replaces the partition instead of appending; a run without a step gets an empty partition
    score_runs(tmp_path, ["run-2", "run-9"])
    counts = dict(connect(tmp_path).execute("select run_id, count(*) from step_anomalies group by run_id").fetchall())
    assert counts == {"run-2": 80, "run-3": 80}
    folder = tmp_path / "step_anomalies"
    assert sorted(p.name for p in folder.iterdir() if p.name != ".locks") == ["run_id=run-2", "run_id=run-3",
                                                                             "run_id=run-9"]
    assert [p.name for p in (folder / "run_id=run-9").iterdir()] == ["part-0.parquet"]
    assert pq.read_table(folder / "run_id=run-9" / "part-0.parquet").num_rows == 0


def test_no_model_is_fitted_on_a_warehouse_without_steps(tmp_path):
    assert fit_anomaly_model(tmp_path) is None
    phases, _ = make_run()  # a run that died before its first step: an empty partition
    write_run_table(tmp_path, "step_phases", "run-0", pa.Table.from_pandas(phases.iloc[:0].drop(columns="run_id"),
                                                                            preserve_index=False))
    assert fit_anomaly_model(tmp_path) is None
    assert load_model(tmp_path) is None and not (tmp_path / "models").exists()


def test_the_warehouse_is_read_without_list_and_map_columns(tmp_path):
    health = pd.DataFrame({"step": [1, 2], "grad_norm": [0.5, 0.25], "nan_keys": [["actor/pg_loss"], []],
                           "verl_values": [[("actor/entropy", 1.5)], []]})
    types = pa.schema([("step", pa.int64()), ("grad_norm", pa.float64()), ("nan_keys", pa.list_(pa.string())),
                       ("verl_values", pa.map_(pa.string(), pa.float64()))])
    write_run_table(tmp_path, "step_health", "run-0", pa.Table.from_pandas(health, schema=types, preserve_index=False))
    with duckdb.connect() as con:
        read = read_table(con, tmp_path, "step_health", ["run-0"])
        assert read_table(con, tmp_path, "step_health", ["run-1"]).empty
    assert sorted(read.columns) == ["grad_norm", "run_id", "step"]
    assert read["run_id"].tolist() == ["run-0", "run-0"] and read["grad_norm"].tolist() == [0.5, 0.25]


def test_rolling_windows_stop_at_the_edges_of_each_run():
    values = pd.DataFrame({"x": [1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0]})
    bounds = group_bounds(np.array(["a", "a", "a", "b", "b", "b", "b"]))
    trailing = run_rolling(values, bounds, 3, 1).median()["x"].tolist()
    assert trailing == [1.0, 1.5, 2.0, 10.0, 15.0, 20.0, 30.0]
    centred = run_rolling(values, bounds, 3, 2, center=True).median()["x"].tolist()
    assert centred == [1.5, 2.0, 2.5, 15.0, 20.0, 30.0, 35.0]


def test_score_runs_without_a_model_uses_the_rules(tmp_path, caplog):
    phases, health = fleet(2, seed=3, episodes={0: ("nan_loss", 30, 31)})
    _write_warehouse(tmp_path, phases, health)
    assert score_runs(tmp_path, ["run-0", "run-1"]) >= 2
    assert "rules alone" in caplog.text
