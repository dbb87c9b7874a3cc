"""Detect layer against ground truth: unseen simulated fleets, the acceptance scorer, and real logs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from lab.evaluate import evaluate, run_evaluate
from pipeline.detect import score_runs
from pipeline.lake import connect


@pytest.fixture(scope="module")
def evaluated(shared_dir):
    """The detector fitted on one simulated fleet, scored on an unseen one and on the healthy real logs."""
    return evaluate(train_seed=5, test_seeds=(105,), runs=36, real_logs=str(shared_dir / "real-logs"))


def test_evaluate_beats_its_parts_and_both_baselines_on_an_unseen_fleet(evaluated):
    det, raw, seed, rules = (evaluated["results"][k] for k in ("detector", "raw_iforest", "seed_thresholds", "rules"))
    named = evaluated["named"]["detector"]
    assert named.episodes > 10
    assert named.f1 >= 0.9 and named.episode_recall >= 0.9 and named.class_accuracy >= 0.9
    assert named.false_alarms_per_1000 <= 5 and det.stray_per_1000 <= 5
    hit, n, _ = det.by_class["other"]
    assert n >= 8 and hit / n >= 0.7
    # what the forest adds: the rules alone find next to none of the kinds no rule names
    assert rules.by_class["other"][0] <= 1
    assert det.f1 > raw.f1 and det.f1 > seed.f1


def test_the_healthy_shared_real_logs_raise_no_flag(evaluated):
    assert sum(n for n, _ in evaluated["real"].values()) > 100
    assert sum(f for _, f in evaluated["real"].values()) == 0


def test_run_evaluate_prints_the_side_by_side_tables(capsys):
    assert run_evaluate(["--runs", "9", "--train-seed", "3", "--test-seeds", "103", "--no-real-logs", "--json"]) == 0
    text = capsys.readouterr().out
    for name in ("detector", "rules", "forest", "raw_iforest", "seed_thresholds", "precision", "ep.recall", "FA/1000",
                 "stray/1000", "class acc", "named classes only", "never seen"):
        assert name in text, name


@pytest.mark.slow
def test_acceptance_scorer_on_the_analysed_fleet(analyzed_fleet, shared_dir):
    labels = analyzed_fleet.archive.parent / "labels.json"
    proc = subprocess.run(
        [sys.executable, str(shared_dir / "tools" / "score_fleet.py"), str(labels), str(analyzed_fleet.warehouse)],
        capture_output=True, text=True, check=False,
    )
    line = proc.stdout.strip().splitlines()[-1]
    score = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
    assert score["step_f1"] >= 0.9, proc.stdout
    assert score["episode_recall"] >= 0.95, proc.stdout
    assert score["false_alarm"] < 0.01, proc.stdout


@pytest.fixture(scope="module")
def real_warehouse(real_logs_dir, tmp_path_factory):
    """The collapsing run (15) and the healthy one (16), ingested, derived and scored by the rules."""
    from pipeline.derive import derive_run_tables
    from pipeline.ingest import discover_runs, ingest_run

    logs = tmp_path_factory.mktemp("real_logs")
    for name in ("15_", "16_"):
        src = next(real_logs_dir.glob(f"{name}*.log"))
        (logs / src.name).write_bytes(src.read_bytes())
    warehouse = tmp_path_factory.mktemp("real_wh")
    ids = []
    for entry in discover_runs(logs, quiet_period_s=0).entries:
        ingest_run(entry, warehouse)
        ids.append(entry.run_id)
    derive_run_tables(warehouse, ids)
    score_runs(warehouse, ids)
    con = connect(warehouse)
    rows = con.execute("select run_id, step, is_anomaly, anomaly_class, explanation from step_anomalies").df()
    return {rid[:2]: part.sort_values("step") for rid, part in rows.groupby("run_id")}


def test_real_length_collapse_is_one_flagged_episode(real_warehouse):
    run = real_warehouse["15"]
    collapse = run[run.step.between(36, 59)]
    assert collapse["is_anomaly"].all()
    assert set(collapse["anomaly_class"]) == {"response_length_collapse"}
    assert collapse["explanation"].str.contains("grad_norm").any()
    assert not run.loc[run.step.between(3, 20), "is_anomaly"].any()


def test_real_healthy_run_has_no_flags(real_warehouse):
    assert not real_warehouse["16"]["is_anomaly"].any()
