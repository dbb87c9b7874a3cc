"""The detector's fleet baseline groups runs by run_baselines' config_group: a config group is defined once,
in sql/run_baselines.sql, and the anomaly model reads it there."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from pipeline import tables
from pipeline.detect.features import fleet_baseline_for, group_medians
from pipeline.detect.warehouse import load_model
from pipeline.lake import connect
from tests.test_simulate_recipes import group_of


@pytest.mark.slow
def test_the_models_fleet_baseline_groups_runs_as_run_baselines_names_them(analyzed_fleet):
    con = connect(analyzed_fleet.warehouse)
    named = dict(con.execute("select run_id, config_group from run_baselines").fetchall())
    phases = con.execute("select run_id, gen from step_phases").df()
    per_run_gen = phases.groupby("run_id")["gen"].median()
    table = load_model(analyzed_fleet.warehouse).fleet_baseline
    # the groups of the runs that logged steps (a run that failed before its first step has no phase times)
    assert set(table.index) - {"*"} == {named[r] for r in per_run_gen.index} - {None}
    # the runs the simulator's labels put in one group (model by name, algorithm, rollout n, batch and
    # mini-batch size, GPUs, engine) share one name, and its row is the median over those runs
    members = defaultdict(list)
    for run_id, label in analyzed_fleet.labels["runs"].items():
        if run_id in per_run_gen.index:
            members[group_of(label)].append(run_id)
    assert len(members) >= 3
    for runs in members.values():
        (name,) = {named[r] for r in runs}
        assert table.loc[name, "gen"] == pytest.approx(np.nanmedian(per_run_gen[runs]))


def test_a_run_without_a_config_group_is_compared_with_the_fleet():
    phases = pd.DataFrame({"run_id": ["a", "a", "b", "b", "c", "c"], "step": [1, 2] * 3,
                           "gen": [1.0, 1.0, 3.0, 3.0, 8.0, 8.0]})
    groups = pd.Series({"a": "m · grpo", "b": "m · grpo", "c": None})
    table = group_medians(phases, groups)
    assert table.loc["m · grpo", "gen"] == 2.0 and table.loc["*", "gen"] == 3.0
    assert list(fleet_baseline_for(["a", "c"], groups, table)["gen"]) == [2.0, 3.0]


def test_the_model_and_step_anomalies_read_run_baselines_which_is_built_before_the_model():
    assert "run_baselines" in tables.MODEL_READS
    assert "run_baselines" in tables.table("step_anomalies").reads
    assert not tables.needs_model("run_baselines")
