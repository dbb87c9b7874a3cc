"""Simulate a fleet: plan which runs fail how, write every archive entry, and write labels.json."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np

from .archive import finish_entry
from .driver_log import write_train_log
from .dynamics import generate_run
from .jsonl_log import jsonl_segment, write_jsonl
from .recipes import Recipe, fleet_recipes
from .spec import RunSpec, draw_spec
from .vocab import ANOMALY_CLASSES, FAILURE_CLASSES
from .wandb_files import write_wandb_files

GENERATOR = "verl-health simulate 1"
# earlier runs of its recipe a run needs before a slowdown is planted in it
SLOW_PRIOR_RUNS = 2


# The failure classes the non-healthy runs cycle through: every class early on, then the new
# outcomes (interrupted, no_outcome) and hang a second time, so each of their kinds shows up.
CLASS_CYCLE = (*FAILURE_CLASSES, "interrupted", "hang", "no_outcome")


def plan_fleet(runs: int, seed: int) -> list[tuple[str, list[str], int]]:
    """(failure class, anomaly classes, variant) per run: a third healthy, the rest cycling through both
    vocabularies. `variant` counts the earlier runs of the same class: it picks the kind of ending."""
    plans: list[tuple[str, list[str]]] = []
    j = 0
    for i in range(runs):
        if i % 3 == 0:
            plans.append(("completed", []))
            continue
        anomalies = [ANOMALY_CLASSES[j % len(ANOMALY_CLASSES)]]
        if j % 4 == 3:
            anomalies.append(ANOMALY_CLASSES[(j + 5) % len(ANOMALY_CLASSES)])
        plans.append((CLASS_CYCLE[j % len(CLASS_CYCLE)], anomalies))
        j += 1
    np.random.default_rng([seed, 0]).shuffle(plans)
    seen: Counter[str] = Counter()
    planned = []
    for cls, anomalies in plans:
        planned.append((cls, anomalies, seen[cls]))
        seen[cls] += 1
    return planned


def make_spec(seed: int, index: int, failure_class: str, anomalies: list[str], steps_scale: float = 1.0,
              chatter: int = 0, variant: int = 0, recipe: Recipe | None = None) -> RunSpec:
    """The spec of run `index` of a fleet with `seed`, drawn from `recipe` (None: a one-off recipe of its
    own); same arguments, same run."""
    rng = np.random.default_rng([seed, index + 1])
    spec = draw_spec(rng, index, failure_class, anomalies, steps_scale, seed=int(rng.integers(2**62)),
                     variant=variant, recipe=recipe)
    spec.chatter = chatter
    return spec


def fleet_specs(runs: int, seed: int, steps_scale: float = 1.0, chatter: int = 0) -> list[RunSpec]:
    """The specs of every run of the fleet `simulate_fleet` writes for these arguments."""
    recipes, own = fleet_recipes(runs, seed)
    specs = [make_spec(seed, index, failure_class, anomalies, steps_scale, chatter, variant, recipes[own[index]])
             for index, (failure_class, anomalies, variant) in enumerate(plan_fleet(runs, seed))]
    plant_slowdowns(specs, seed)
    return specs


def plant_slowdowns(specs: list[RunSpec], seed: int) -> None:
    """Make about one run in 25 (at least one when any qualifies) run 1.6-2.4x slower per step than its
    recipe's pace, as a slower node or a performance regression in a new verl build would.

    Only a completed run with step lines qualifies, and only when at least `SLOW_PRIOR_RUNS` runs of its
    recipe that log steps started a day or more before it, so it has a baseline to be measured against.
    """
    rng = np.random.default_rng([seed, 2])
    logged = [s for s in specs if s.step_lines and s.last_step > 0]
    candidates = [s for s in specs if s.failure_class == "completed" and s.step_lines
                  and sum(p.recipe == s.recipe and p.start_ts < s.start_ts - 86_400 for p in logged) >= SLOW_PRIOR_RUNS]
    rng.shuffle(candidates)
    recipes: set[str] = set()
    for spec in candidates:
        if len(recipes) >= max(1, len(specs) // 25):
            break
        if spec.recipe not in recipes:
            recipes.add(spec.recipe)
            spec.slowdown = float(rng.uniform(1.6, 2.4))


def write_run(spec: RunSpec, archive_dir: Path) -> dict:
    """Write one run's archive entry; return its labels."""
    trace = generate_run(spec)
    staging = archive_dir / f".staging-{spec.run_id}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    worker_dir = staging / "ray_logs" if spec.worker_logs else None
    if worker_dir:
        worker_dir.mkdir()
    with open(staging / "train.log", "w", encoding="utf-8", newline="\n") as out:
        failure, con = write_train_log(trace, out, worker_dir)
        worker_files = [f"ray_logs/{name}" for name in con.close()]
    log_name = f"{spec.run_id}.log" if spec.archive_form == "gz" else "train.log"
    if spec.capture == "wandb":
        log_name = _wandb_folder(staging, trace, con)
    jsonl_file = None
    launch = jsonl_segment(spec) if spec.has_jsonl else None
    if launch is not None:
        jsonl_file = f"{spec.project}/{spec.experiment}.jsonl"
        (staging / spec.project).mkdir()
        with open(staging / jsonl_file, "w", encoding="utf-8", newline="\n") as out:
            write_jsonl(trace, out, launch)
    for entry in (archive_dir / spec.run_id, archive_dir / f"{spec.run_id}.tar.gz", archive_dir / f"{spec.run_id}.log.gz"):
        if entry.is_dir():
            shutil.rmtree(entry)
        elif entry.exists():
            entry.unlink()
    entry = finish_entry(staging, archive_dir, spec.run_id, spec.archive_form, con.clock)
    return _labels(spec, trace, failure, entry, log_name, jsonl_file, worker_files, con)


def _wandb_folder(staging: Path, trace, con) -> str:
    """Move the console capture into its wandb run folder beside wandb's other files; return its path."""
    files = Path("wandb") / con.wandb_run / "files"
    (staging / files).mkdir(parents=True)
    (staging / "train.log").rename(staging / files / "output.log")
    write_wandb_files(staging / files, trace, con.wandb_started, con.clock)
    return (files / "output.log").as_posix()


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def _labels(spec, trace, failure, entry, log_name, jsonl_file, worker_files, con) -> dict:
    return {
        "failure_class": spec.failure_class,
        "stop_reason": spec.stop_reason,
        "hang_reason": failure.hang_reason if failure else None,
        "hang_evidence": spec.hang_evidence,
        "last_step": spec.last_step,
        "expected_steps": spec.total_steps,
        "n_steps_logged": len(set(trace.step.tolist())) if spec.step_lines else 0,
        "step_lines": spec.step_lines,
        "first_error_line_contains": failure.contains if failure else None,
        "format": spec.fmt,
        "archive_form": spec.archive_form,
        "capture": spec.capture,
        "episodes": [e.label() for e in spec.episodes],
        "failure_phase": spec.failure_phase,
        "root_cause_file": log_name if failure else None,
        "root_cause_line_no": failure.root_line_no if failure else None,
        "signature": failure.signature if failure else None,
        "rendezvous": spec.rendezvous,
        "crash_in_step_1": spec.step1,
        "buffered_steps": spec.buffered_steps,
        "segments": len(spec.segments),
        "segment_start_steps": [s.start_step for s in spec.segments],
        "has_jsonl": jsonl_file is not None,
        "jsonl_file": jsonl_file,
        "worker_log_files": worker_files,
        "entry": entry.name,
        "log_file": log_name,
        "debug_memory": spec.debug_memory,
        "ansi": spec.ansi,
        "runner_name": spec.runner_name,
        "first_ts": _iso(con.wandb_started if spec.capture == "wandb" else spec.start_ts),
        "last_ts": _iso(con.clock),
        "project_name": spec.project,
        "experiment_name": spec.experiment,
        "model_path": spec.model_path,
        "rollout_engine": spec.rollout,
        "rollout_mode": spec.rollout_mode,
        "adv_estimator": spec.algo,
        "strategy": "fsdp",
        "n_gpus_per_node": spec.n_gpus_per_node,
        "nnodes": spec.nnodes,
        "rollout_n": spec.n,
        "rollout_tp": spec.tp,
        "train_batch_size": spec.train_batch_size,
        "ppo_mini_batch_size": spec.ppo_mini_batch_size,
        "ppo_micro_batch_size_per_gpu": spec.ppo_micro_batch_size_per_gpu,
        "max_prompt_length": spec.max_prompt_length,
        "max_response_length": spec.max_response_length,
        "total_training_steps": spec.total_steps,
        "test_freq": spec.test_freq,
        "save_freq": spec.save_freq,
        "gpu_memory_utilization": spec.gpu_memory_utilization,
        "actor_lr": spec.lr,
        "use_kl_loss": spec.use_kl_loss,
        "recipe": spec.recipe,
        "slowdown": round(spec.slowdown, 4),
    }


def simulate_fleet(out_dir: Path, runs: int, seed: int, steps_scale: float = 1.0, chatter: int = 0) -> dict:
    """Write `out_dir/archive/<entry>` for `runs` runs and `out_dir/labels.json`; return the labels.

    `steps_scale` multiplies every run's planned length; `chatter` adds that many worker-warning lines
    per step (to make very large logs). The same arguments give byte-identical output.
    """
    out_dir = Path(out_dir)
    archive_dir = out_dir / "archive"
    archive_dir.mkdir(parents=True, exist_ok=True)
    labels_runs = {}
    for spec in fleet_specs(runs, seed, steps_scale, chatter):
        labels_runs[spec.run_id] = write_run(spec, archive_dir)
    counts = {c: 0 for c in FAILURE_CLASSES}
    for lab in labels_runs.values():
        counts[lab["failure_class"]] += 1
    labels = {"seed": seed, "generator": GENERATOR, "steps_scale": steps_scale, "failure_classes": counts,
              "runs": dict(sorted(labels_runs.items()))}
    (out_dir / "labels.json").write_text(json.dumps(labels, indent=1) + "\n", encoding="utf-8")
    return labels
