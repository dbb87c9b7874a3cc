"""Detect layer against ground truth: unseen simulated fleets, the acceptance scorer, and real logs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pipeline.detect import evaluate, run_evaluate, score_runs
from pipeline.lake import connect


def test_evaluate_beats_both_baselines_on_an_unseen_fleet():
    out = evaluate(train_seed=5, test_seeds=(105,), runs=24)
    det, raw, seed = (out["results"][k] for k in ("detector", "raw_iforest", "seed_thresholds"))
    assert det.episodes > 10
    assert det.f1 >= 0.85 and det.episode_recall >= 0.9 and det.class_accuracy >= 0.9
    assert det.false_alarms_per_1000 < 10
    assert det.f1 > raw.f1 and det.f1 > seed.f1


def test_run_evaluate_prints_the_side_by_side_table(capsys):
    assert run_evaluate(["--runs", "9", "--train-seed", "3", "--test-seeds", "103", "--json"]) == 0
    text = capsys.readouterr().out
    for name in ("detector", "raw_iforest", "seed_thresholds", "precision", "ep.recall", "FA/1000", "class acc"):
        assert name in text


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
