"""Simulated runs look like the real verl logs in ../shared/real-logs of the same verl version.

The differences kept on purpose are listed here and explained in docs/simulator.md.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from lab.simulate import make_spec, simulate_fleet
from lab.simulate.fleet import write_run

REAL = Path(__file__).resolve().parents[2] / "shared" / "real-logs"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"real verl logs not found at {REAL} (sibling ../shared)")

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A line kind is a pattern a log reader keys on; each must occur in real logs and in simulated ones.
KINDS = {
    "step_metrics": r"^(?:\([^)]*\) )?step:\d+ - ",
    "progress": r"Training Progress:",
    "progress_cr": r"\rTraining Progress:",
    "ray_start": r"Started a local Ray instance",
    "taskrunner_host": r"TaskRunner hostname: ",
    "config_pprint": r"\{'actor_rollout_ref': ",
    "total_steps": r"Total training steps: \d+",
    "dataset_len": r"dataset len: \d+",
    "checkpoint_lookup": r"Checkpoint tracker file does not exist|Found checkpoint",
    "validation_meta": r"test_gen_batch meta info",
    "validation_pprint": r"\(\"(?:Initial|Final) validation metrics",
    "sample": r"\[(?:prompt|response|ground_truth|score)\] ",
    "memory": r"memory allocated \(GB\)",
    "repeated": r"\[repeated \d+x across cluster\]",
    "worker_prefix": r"\(WorkerDict pid=\d+",
    "runner_prefix": r"\((?:TaskRunner|main_task) pid=\d+\)",
    "raylet": r"\(raylet\)",
    "traceback": r"Traceback \(most recent call last\)",
    "ray_task_error": r"ray\.exceptions\.RayTaskError\(",
    "hydra_error": r"Error executing job with overrides",
    "hydra_hint": r"HYDRA_FULL_ERROR=1",
    "python_log": r"(?:DEBUG|INFO|WARNING|ERROR):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}:",
    "vllm_warning": r"WARNING \d\d-\d\d \d\d:\d\d:\d\d",
    "user_warning": r"(?:User|Future|Deprecation)Warning",
    "ansi": "\x1b\\[",
}
# Real logs by era: TaskRunner + `TaskRunner hostname` (v0.5+) versus the `%.3f` era (<= v0.4).
NEW_ERA = ("06_", "15_", "16_", "27_", "29_", "34_", "35_")
OLD_ERA = ("02_", "03_", "04_", "05_", "08_", "10_", "11_", "12_", "13_", "18_", "20_", "21_", "23_", "31_")

# Documented differences (docs/simulator.md, "Differences from the real logs").
NP2_REAL_ONLY = {"actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff"}
NP2_SIM_ONLY = {"actor/kl_loss", "actor/kl_coef"}
V04_REAL_ONLY = {"actor/entropy_loss"}
V04_SIM_ONLY = {"actor/entropy", "actor/pg_clipfrac_lower", "actor/grad_norm", "perf/max_memory_allocated_gb",
                "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb", "actor/lr", "training/global_step",
                "training/epoch", "timing_s/reward"}


def kinds(text: str) -> set[str]:
    plain = ANSI.sub("", text)
    return {name for name, pat in KINDS.items()
            if re.search(pat, text if name in ("ansi", "progress_cr") else plain, re.M)}


def real_text(prefix: str) -> str:
    return next(REAL.glob(f"{prefix}*.log")).read_bytes().decode("utf-8", "replace")


def step_pairs(text: str, step: int = 1) -> dict[str, str]:
    """key -> printed value of the first `step:<step>` line."""
    for raw in text.split("\n"):
        m = re.search(rf"step:{step} - (.*)$", ANSI.sub("", raw))
        if m:
            return {k: v for k, _, v in (p.rpartition(":") for p in m.group(1).split(" - "))}
    raise AssertionError(f"no step:{step} line")


def simulated_pairs(tmp_path: Path, **fields) -> dict[str, str]:
    """The step:1 line of a healthy simulated run with the given config fields."""
    spec = make_spec(3, 1, "completed", [], 0.3)
    spec = dataclasses.replace(spec, archive_form="dir", test_freq=5, save_freq=-1, **fields)
    lab = write_run(spec, tmp_path)
    return step_pairs((tmp_path / lab["entry"] / "train.log").read_bytes().decode("utf-8"))


def test_v05_bare_keys_equal_the_real_v05_grpo_run(tmp_path):
    real = step_pairs(real_text("29_"))
    sim = simulated_pairs(tmp_path, fmt="bare", algo="grpo", n=8, use_kl_loss=False, rollout_mode="sync")
    assert set(sim) == set(real)
    assert not any(v.startswith("np.") for v in [*real.values(), *sim.values()])


def test_v06_np2_keys_and_wrappers_match_the_real_np2_run(tmp_path):
    real = step_pairs(real_text("16_"))
    sim = simulated_pairs(tmp_path, fmt="np2", algo="grpo", n=8, use_kl_loss=True, rollout_mode="agent_loop")
    assert set(real) - set(sim) == NP2_REAL_ONLY
    assert set(sim) - set(real) == NP2_SIM_ONLY
    wrapped = {k for k in set(real) & set(sim) if real[k].startswith("np.") != sim[k].startswith("np.")}
    assert not wrapped, f"numpy wrapper differs for {sorted(wrapped)}"


def test_old_format_prints_three_decimals_like_the_real_old_runs(tmp_path):
    real = step_pairs(real_text("08_"))
    sim = simulated_pairs(tmp_path, fmt="v04", algo="grpo", n=5, use_kl_loss=True, rollout_mode="sync")
    for values in (real, sim):
        assert all(re.fullmatch(r"-?\d+\.\d{3}", v) for v in values.values())
    assert set(real) - set(sim) == V04_REAL_ONLY
    assert set(sim) - set(real) == V04_SIM_ONLY


def test_line_kinds_of_real_logs_all_occur_in_a_simulated_fleet(tmp_path):
    labels = simulate_fleet(tmp_path, runs=40, seed=9)
    sim = {"new": set(), "old": set()}
    for lab in labels["runs"].values():
        entry = tmp_path / "archive" / lab["entry"]
        if entry.is_dir():
            sim["old" if lab["format"] == "v04" else "new"] |= kinds((entry / lab["log_file"]).read_bytes().decode("utf-8"))
    real = {"new": set(), "old": set()}
    for era, prefixes in (("new", NEW_ERA), ("old", OLD_ERA)):
        for p in prefixes:
            real[era] |= kinds(real_text(p))
    assert real["new"] <= sim["new"], real["new"] - sim["new"]
    assert real["old"] <= sim["old"] | sim["new"], real["old"] - sim["old"] - sim["new"]
    assert "taskrunner_host" in sim["new"] and "progress_cr" in sim["new"]
