"""The `verl-health` console script: demo and analyze, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

VERL_HEALTH = Path(sys.executable).parent / "verl-health"


def test_demo_simulates_analyses_and_writes_both_reports(tmp_path):
    proc = subprocess.run(
        [str(VERL_HEALTH), "demo", "--data", str(tmp_path / "data"), "--reports", str(tmp_path / "reports"),
         "--runs", "4", "--seed", "3"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    labels = json.loads((tmp_path / "data" / "labels.json").read_text())
    assert len(labels["runs"]) == 4
    for run_id in labels["runs"]:
        assert (tmp_path / "reports" / "runs" / f"{run_id}.html").is_file()
    assert (tmp_path / "reports" / "fleet" / "latest.html").is_file()
    assert "analysed 4 runs" in proc.stdout and "fleet report:" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr


def test_catalog_opens_from_another_folder(tmp_path):
    """The warehouse built with relative paths answers queries from wherever the duckdb shell starts."""
    subprocess.run([str(VERL_HEALTH), "simulate", "sim", "--runs", "2", "--seed", "5"], cwd=tmp_path, check=True,
                   capture_output=True)
    subprocess.run([str(VERL_HEALTH), "analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep"],
                   cwd=tmp_path, check=True, capture_output=True)
    query = "import duckdb; print(duckdb.connect('warehouse.duckdb').execute('select count(*) from run_summary').fetchone()[0])"
    out = subprocess.run([sys.executable, "-c", query], cwd=tmp_path / "wh", check=True, capture_output=True,
                         text=True)
    assert out.stdout.strip() == "2"


def test_analyze_refuses_a_missing_archive(tmp_path):
    proc = subprocess.run([str(VERL_HEALTH), "analyze", str(tmp_path / "nope")], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr


def test_analyze_one_finished_run(tmp_path):
    subprocess.run([str(VERL_HEALTH), "simulate", "sim", "--runs", "2", "--seed", "8"], cwd=tmp_path, check=True,
                   capture_output=True)
    labels = json.loads((tmp_path / "sim" / "labels.json").read_text())
    run_id, lab = sorted(labels["runs"].items())[0]
    proc = subprocess.run(
        [str(VERL_HEALTH), "analyze", "--run", str(tmp_path / "sim" / "archive" / lab["entry"]),
         "--warehouse", "wh", "--reports", "rep"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{run_id}: {lab['failure_class']} at step {lab['last_step']}")
    assert (tmp_path / "rep" / "runs" / f"{run_id}.html").is_file()
    assert not (tmp_path / "rep" / "runs" / f"{sorted(labels['runs'])[1]}.html").exists()

    missing = subprocess.run([str(VERL_HEALTH), "analyze", "sim/archive", "--run", "no-such-run"], cwd=tmp_path,
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and "no run 'no-such-run'" in missing.stderr


def test_analyze_one_run_refuses_what_it_cannot_do(tmp_path):
    log = tmp_path / "run-x.log"
    log.write_text("step:1 - a:1\n")
    proc = subprocess.run([str(VERL_HEALTH), "analyze", "--run", str(log), "--warehouse", "s3://bucket/wh"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "local warehouse" in proc.stderr
    assert not (tmp_path / "s3:").exists()
