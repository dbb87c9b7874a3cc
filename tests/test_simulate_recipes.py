"""A simulated fleet re-runs a few recipes, as real fleets do: its config groups hold several runs each,
the warehouse's run_baselines finds the same groups, and a planted slowdown is a regression there."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from pipeline.lake import connect

# what a recipe fixes, as labels.json names it (beyond the config group's own settings)
RECIPE_FIELDS = ("format", "model_path", "adv_estimator", "rollout_engine", "rollout_n", "rollout_tp",
                 "train_batch_size", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "max_prompt_length",
                 "max_response_length", "n_gpus_per_node", "nnodes", "expected_steps", "actor_lr", "use_kl_loss",
                 "project_name")


def group_of(lab: dict) -> tuple:
    """The settings that decide whether two runs compare (model by name, algorithm, rollout n, batch and
    mini-batch size, GPUs, engine), read from the labels."""
    return (lab["model_path"].rstrip("/").rsplit("/", 1)[-1], lab["adv_estimator"], lab["rollout_n"],
            lab["train_batch_size"], lab["ppo_mini_batch_size"], lab["n_gpus_per_node"] * lab["nnodes"],
            lab["rollout_engine"])


def earlier_in_group(runs: dict) -> dict[str, int]:
    """Per run, how many runs of its group ended before it (by the labels' last timestamp, then run_id)."""
    by_group = defaultdict(list)
    for run_id, lab in runs.items():
        by_group[group_of(lab)].append((lab["last_ts"], run_id))
    return {run_id: sorted(members).index((runs[run_id]["last_ts"], run_id))
            for members in by_group.values() for _, run_id in members}


def test_a_40_run_fleet_reruns_a_few_recipes(sim_fleet):
    runs = sim_fleet.labels["runs"]
    assert len(runs) == 40
    groups = Counter(group_of(lab) for lab in runs.values())
    assert len(groups) <= 14
    assert sum(n >= 4 for n in groups.values()) >= 3
    assert 1 in groups.values()  # some recipes run once
    earlier = earlier_in_group(runs)
    assert sum(n >= 1 for n in earlier.values()) >= 24
    recipes = defaultdict(list)
    for lab in runs.values():
        recipes[lab["recipe"]].append(lab)
    for name, labs in recipes.items():
        for field in RECIPE_FIELDS:
            assert len({lab[field] for lab in labs}) == 1, (name, field)


def test_runs_of_a_recipe_spread_over_time_and_some_relaunch_one_experiment(sim_fleet):
    recipes = defaultdict(list)
    for lab in sim_fleet.labels["runs"].values():
        recipes[lab["recipe"]].append(lab)
    big = [labs for labs in recipes.values() if len(labs) >= 4]
    assert big
    for labs in big:
        assert len({lab["first_ts"][:10] for lab in labs}) >= 3
    experiments = Counter(lab["experiment_name"] for labs in recipes.values() for lab in labs)
    assert max(experiments.values()) >= 2


@pytest.mark.slow
def test_run_baselines_groups_agree_and_the_planted_slowdown_is_a_regression(analyzed_fleet):
    runs = analyzed_fleet.labels["runs"]
    con = connect(analyzed_fleet.warehouse)
    rows = con.execute("select run_id, config_group, group_prior_runs, group_step_ratio from run_baselines").fetchall()
    sql_group = {run_id: group for run_id, group, _, _ in rows}
    assert set(sql_group) == set(runs)
    pairs = {(group_of(runs[run_id]), group) for run_id, group in sql_group.items()}
    assert len({g for g, _ in pairs}) == len({s for _, s in pairs}) == len(pairs)  # one-to-one
    # the planted run ends after at least two logged runs of its group, and is slower than them beyond 1.25x
    slow = [run_id for run_id, lab in runs.items() if lab["slowdown"] > 1]
    assert slow
    got = {run_id: (prior, ratio) for run_id, _, prior, ratio in rows}
    for run_id in slow:
        assert runs[run_id]["failure_class"] == "completed"
        prior, ratio = got[run_id]
        assert prior >= 2 and ratio > 1.25, (run_id, prior, ratio, runs[run_id]["slowdown"])
    earlier = earlier_in_group(runs)
    assert sum(n >= 1 for n in earlier.values()) >= 24
