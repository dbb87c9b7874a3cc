"""Discovery: run ids, collisions, archive forms, finished and unfinished runs."""

from __future__ import annotations

import os
import time

from pipeline.ingest import discover_runs, run_id_for


def _touch(path, text="hello\n", age_s=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_run_ids():
    assert run_id_for("exp 1.tar.gz") == "exp_1"
    assert run_id_for("run-7.log.gz") == "run-7"
    assert run_id_for("a.tgz") == "a"
    assert run_id_for("b.zip") == "b"
    assert run_id_for("c.txt") == "c"
    assert run_id_for("2024-01-05.log") == "run_2024-01-05"
    assert run_id_for("_x") == "run__x"
    assert run_id_for("SOURCES.md") == "SOURCES.md"


def test_forms_and_collisions(tmp_path):
    old = 3600
    _touch(tmp_path / "dirrun" / "train.log", age_s=old)
    _touch(tmp_path / "solo.log", age_s=old)
    _touch(tmp_path / "packed.tar.gz", age_s=old)
    _touch(tmp_path / "z.zip", age_s=old)
    _touch(tmp_path / "single.gz", age_s=old)
    _touch(tmp_path / "twin.log", age_s=old)
    _touch(tmp_path / "twin.tar.gz", age_s=old)
    _touch(tmp_path / ".hidden", age_s=old)
    found = discover_runs(tmp_path)
    forms = {e.run_id: e.form for e in found.entries}
    assert forms == {"dirrun": "dir", "solo": "log", "packed": "tar.gz", "z": "zip", "single": "gz"}
    assert len(found.errors) == 1
    assert "twin.log" in found.errors[0] and "twin.tar.gz" in found.errors[0]
    assert all(e.finished for e in found.entries)


def test_unfinished_and_end_markers(tmp_path):
    _touch(tmp_path / "fresh.log", "step:1 - a:1\n")
    _touch(
        tmp_path / "done.log", "step:9 - a:1\n(TaskRunner pid=1) (\"Final validation metrics: {'x': 1}\")\n"
    )
    _touch(
        tmp_path / "crashed.log", 'Traceback (most recent call last):\n  File "x", line 1\nValueError: boom\n'
    )
    _touch(tmp_path / "hydra.log", "Error executing job with overrides: ['a=1']\nmore\n")
    _touch(tmp_path / "flagged" / "train.log", "step:1 - a:1\n")
    _touch(tmp_path / "flagged" / "_SUCCESS", "")
    _touch(tmp_path / "sib.log", "step:1 - a:1\n")
    _touch(tmp_path / "sib.log.done", "")
    found = discover_runs(tmp_path, quiet_period_s=600)
    by = {e.run_id: e for e in found.entries}
    assert not by["fresh"].finished and by["fresh"].end_marker is None
    assert by["done"].finished and by["done"].end_marker == "Final validation metrics"
    assert by["crashed"].finished and by["crashed"].end_marker == "final traceback"
    assert by["hydra"].end_marker == "Error executing job"
    assert by["flagged"].end_marker == "_SUCCESS"
    assert by["sib"].end_marker == ".done"
    assert "sib.log" not in {e.path.name for e in found.entries if e.run_id != "sib"}
    later = discover_runs(tmp_path, quiet_period_s=600, now=time.time() + 601)
    assert all(e.finished for e in later.entries)


def test_files_about_the_runs_are_not_runs(tmp_path):
    """README, SOURCES.md, label files and checksums beside the runs are skipped entries, each with why."""
    old = 3600
    _touch(tmp_path / "grpo-a" / "train.log", "step:1 - a:1\n", age_s=old)
    _touch(tmp_path / "ppo-b.log", "step:1 - a:1\n", age_s=old)
    for name in ("README", "SOURCES.md", "notes.rst", "LABELS.jsonl", "labels.json", "SHA256SUMS",
                 "ppo-b.log.sha256", "checksums.txt"):
        _touch(tmp_path / name, "about the runs\n", age_s=old)
    found = discover_runs(tmp_path)
    assert sorted(e.run_id for e in found.entries) == ["grpo-a", "ppo-b"]
    assert found.skipped == {
        "README": "not a run (documentation)", "SOURCES.md": "not a run (documentation)",
        "notes.rst": "not a run (documentation)", "LABELS.jsonl": "not a run (labels)",
        "labels.json": "not a run (labels)", "SHA256SUMS": "not a run (checksums)",
        "ppo-b.log.sha256": "not a run (checksums)", "checksums.txt": "not a run (checksums)",
    }
    assert found.errors == []


def test_the_shared_real_logs_folder_holds_one_run_per_log(real_logs_dir):
    """In ../shared/real-logs every `.log` is a run; its SOURCES.md and LABELS.jsonl are not."""
    found = discover_runs(real_logs_dir, quiet_period_s=0)
    assert sorted(e.path.name for e in found.entries) == sorted(p.name for p in real_logs_dir.glob("*.log"))
    assert set(found.skipped) == {"SOURCES.md", "LABELS.jsonl"}
