"""Recipes: the settings a team launches again and again (same experiment with other seeds, on other
days, resumed), and how a fleet's runs are spread over them.

A recipe fixes what decides a step's work and its speed: model, dataset, algorithm, rollout engine and
n, batch sizes, lengths, GPUs and nodes, verl version (log format), planned length, and the cluster's
speed. Its runs differ in seed, date, ending, injected anomalies and how their logs were kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .vocab import DATASETS, FORMATS, MODELS


@dataclass(frozen=True)
class Recipe:
    """One launch recipe: `settings` are the RunSpec fields every run drawn from it shares."""

    name: str
    experiment: str
    steps: float  # planned training steps before the fleet's steps_scale
    test_freq: int
    save_freq: int
    settings: dict = field(default_factory=dict)


def draw_recipe(rng: np.random.Generator, name: str, fmt: str | None = None) -> Recipe:
    """A realistic recipe; `fmt` forces its verl version (log format)."""
    fmt = fmt or str(rng.choice(FORMATS, p=[0.45, 0.3, 0.25]))
    algo = "gae" if rng.random() < 0.3 else "grpo"
    model = MODELS[int(rng.integers(len(MODELS)))]
    dataset = DATASETS[int(rng.integers(len(DATASETS)))]
    tbs = int(rng.choice([64, 128, 256, 512, 1024]))
    settings = dict(
        fmt=fmt, algo=algo, model_path=model[0], model_short=model[1], model_class=model[2], model_size=model[3],
        model_b=model[4], dataset=dataset[0], data_source=dataset[1], train_size=dataset[2], val_size=dataset[3],
        rollout="sglang" if fmt == "np2" and rng.random() < 0.3 else "vllm",
        project=str(rng.choice(["verl_examples", "verl_grpo_example_gsm8k", "rl-math", "reasoning-rl"])),
        n=1 if algo == "gae" else int(rng.choice([4, 5, 8, 16])),
        tp=int(rng.choice([1, 2, 4])) if model[4] < 5 else int(rng.choice([2, 4])),
        gpu_memory_utilization=float(rng.choice([0.4, 0.5, 0.6, 0.7, 0.8])),
        train_batch_size=tbs, ppo_mini_batch_size=max(16, tbs // int(rng.choice([2, 4, 8]))),
        ppo_micro_batch_size_per_gpu=int(rng.choice([2, 4, 8, 16])),
        max_prompt_length=int(rng.choice([512, 1024])), max_response_length=int(rng.choice([512, 1024, 2048, 4096])),
        lr=float(rng.choice([1e-6, 5e-7, 3e-6])), n_gpus_per_node=int(rng.choice([4, 8, 8, 8])),
        nnodes=int(rng.choice([1, 1, 1, 2])), recipe=name,
    )
    steps = max(20.0, float(rng.lognormal(np.log(90), 0.5)))
    test_freq, save_freq = int(rng.choice([5, 10, 20, 25])), int(rng.choice([-1, 10, 20, 50]))
    settings.update(
        use_kl_loss=algo == "grpo" and rng.random() < 0.7, val_n=int(rng.choice([1, 1, 4])),
        gpu_total_gb=float(rng.choice([79.11, 79.25, 94.5, 139.81])),
        gen_cost=float(rng.uniform(4e-5, 2e-4)), response_fraction=float(rng.uniform(0.15, 0.4)),
        length_growth=float(rng.uniform(-0.1, 0.8)),
    )
    return Recipe(name=name, experiment=f"{model[1]}_{algo}_{dataset[0]}_{name}", steps=steps,
                  test_freq=test_freq, save_freq=save_freq, settings=settings)


def fleet_recipes(runs: int, seed: int) -> tuple[list[Recipe], list[int]]:
    """The fleet's recipes and, per run, the index of its recipe.

    About one recipe per six runs is shared (each gets at least two runs, the rest at random with
    uneven weights), and about one run in eight is a one-off recipe of its own. The first three shared
    recipes cover the three verl versions. Runs are shuffled, so a recipe's runs spread over the fleet.
    """
    rng = np.random.default_rng([seed, 1])
    shared = max(1, math.ceil(runs / 6))
    solo = round(runs * 0.12) if runs >= shared * 2 + 1 else 0
    recipes = [draw_recipe(np.random.default_rng([seed, 1, k]), f"r{k:02d}", FORMATS[k] if k < len(FORMATS) else None)
               for k in range(shared + solo)]
    pool = runs - solo
    own = [k % shared for k in range(min(pool, 2 * shared))]
    weights = rng.dirichlet(np.full(shared, 1.5))
    own += [int(k) for k in rng.choice(shared, size=pool - len(own), p=weights)]
    own += list(range(shared, shared + solo))
    rng.shuffle(own)
    return recipes, own
