"""The disk holding the Dagster record fills up during `analyze`: one clear line, nothing lost, the next run heals.

A real full disk: a small tmpfs mounted as $DAGSTER_HOME (needs root, as CI runs; skipped elsewhere with the reason).
"""

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = 6


def _mount_tiny(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def _analyze(archive: Path, warehouse: Path, reports: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "analyze", str(archive), "--warehouse", str(warehouse),
                           "--reports", str(reports)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_full_record_disk_ends_in_one_clear_line_and_the_next_analyze_heals(tmp_path):
    tiny = tmp_path / "record"
    if not _mount_tiny(tiny, "600k"):
        if os.environ.get("CI"):
            pytest.fail("CI runs as root and must mount a tmpfs to fill a disk")
        pytest.skip("mounting a tmpfs needs root")
    archive, warehouse, reports = tmp_path / "archive", tmp_path / "wh", tmp_path / "reports"
    archive.mkdir()
    (archive / "small-run.log").write_text("".join(
        f"step:{n} - actor/entropy:0.5 - critic/score/mean:0.{n} - timing_s/gen:6.0 - timing_s/step:10.0\n"
        for n in range(1, STEPS + 1)))
    try:
        full = _analyze(archive, warehouse, reports, tiny)
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=True)
    assert full.returncode == 1, full.stderr[-2000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the disk holding the Dagster record ({tiny}) is full"), last
    assert "Traceback (most recent call last)" not in full.stderr

    healed = _analyze(archive, warehouse, reports, tmp_path / "roomy")
    assert healed.returncode == 0, healed.stderr[-2000:]
    assert (reports / "runs" / "small-run.html").is_file()
    con = duckdb.connect()
    [(last_step,)] = con.execute(
        f"select last_step from read_parquet('{warehouse}/run_summary/**/*.parquet', hive_partitioning=true)"
    ).fetchall()
    assert last_step == STEPS


def test_sqlites_disk_io_error_on_a_full_record_disk_is_a_full_disk(tmp_path, monkeypatch):
    """SQLite can fail a write on a full disk with "disk I/O error" (the record's first connection did, setting
    its journal mode): on a disk that is full that is the full disk's one clear line; on a disk with room it
    stays an error of its own."""
    import argparse
    import sqlite3

    from pipeline.cli import disk_full

    tiny = tmp_path / "record"
    if not _mount_tiny(tiny, "64k"):
        if os.environ.get("CI"):
            pytest.fail("CI runs as root and must mount a tmpfs to fill a disk")
        pytest.skip("mounting a tmpfs needs root")
    try:
        with pytest.raises(OSError), open(tiny / "filler", "wb", buffering=0) as fh:
            while True:
                fh.write(b"\0" * 4096)
        error = sqlite3.OperationalError("disk I/O error")
        args = argparse.Namespace(warehouse=str(tmp_path / "wh"))
        monkeypatch.setenv("DAGSTER_HOME", str(tiny))
        assert disk_full(error, args).startswith(f"the disk holding the Dagster record ({tiny}) is full")
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
        assert disk_full(error, args) is None
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=True)
