"""Discovery: run ids, collisions, archive forms, finished and unfinished runs."""

from __future__ import annotations

import gzip
import os
import time

from pipeline.ingest import discover_runs, run_id_for
from pipeline.selection import no_runs_message


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
    assert run_id_for("GRPO.log") == "GRPO"


def test_forms_and_collisions(tmp_path):
    old = 3600
    _touch(tmp_path / "dirrun" / "train.log", age_s=old)
    _touch(tmp_path / "solo.log", age_s=old)
    _touch(tmp_path / "packed.tar.gz", age_s=old)
    _touch(tmp_path / "short.tgz", age_s=old)
    _touch(tmp_path / "z.zip", age_s=old)
    _touch(tmp_path / "single.gz", age_s=old)
    _touch(tmp_path / "twin.log", age_s=old)
    _touch(tmp_path / "twin.tar.gz", age_s=old)
    _touch(tmp_path / ".hidden", age_s=old)
    found = discover_runs(tmp_path)
    forms = {e.run_id: e.form for e in found.entries}
    assert forms == {"dirrun": "dir", "solo": "log", "packed": "tar.gz", "short": "tar.gz", "z": "zip", "single": "gz"}
    assert found.errors == ["run_id 'twin' is given by 2 entries (twin.log, twin.tar.gz): none ingested"]
    assert all(e.finished for e in found.entries)


def test_unfinished_and_end_markers(tmp_path):
    _touch(tmp_path / "fresh.log", "step:1 - a:1\n")
    _touch(
        tmp_path / "done.log", "step:9 - a:1\n(TaskRunner pid=1) (\"Final validation metrics: {'x': 1}\")\n"
    )
    _touch(
        tmp_path / "crashed.log", 'Traceback (most recent call last):\n  File "x", line 1\nValueError: boom\n\n\n\n'
    )
    _touch(tmp_path / "hydra.log", "Error executing job with overrides: ['a=1']\nmore\n")
    _touch(tmp_path / "flagged" / "train.log", "step:1 - a:1\n")
    _touch(tmp_path / "flagged" / "_SUCCESS", "")
    _touch(tmp_path / "sib.log", "step:1 - a:1\n")
    _touch(tmp_path / "sib.log.done", "")
    found = discover_runs(tmp_path, quiet_period_s=600)
    by = {e.run_id: e for e in found.entries}
    assert sorted(by) == ["crashed", "done", "flagged", "fresh", "hydra", "sib"]
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
    _touch(tmp_path / "notes" / "train.log", "step:1 - a:1\n", age_s=old)  # a run folder, whatever its name
    for name in ("README", "SOURCES.md", "notes.rst", "LABELS.jsonl", "labels.v2.json", "SHA256SUMS",
                 "ppo-b.log.sha256", "checksums.txt"):
        _touch(tmp_path / name, "about the runs\n", age_s=old)
    found = discover_runs(tmp_path)
    assert sorted(e.run_id for e in found.entries) == ["grpo-a", "notes", "ppo-b"]
    assert found.skipped == {
        "README": "not a run (documentation)", "SOURCES.md": "not a run (documentation)",
        "notes.rst": "not a run (documentation)", "LABELS.jsonl": "not a run (labels)",
        "labels.v2.json": "not a run (labels)", "SHA256SUMS": "not a run (checksums)",
        "ppo-b.log.sha256": "not a run (checksums)", "checksums.txt": "not a run (checksums)",
    }
    assert found.errors == []


def test_the_shared_real_logs_folder_holds_one_run_per_log(real_logs_dir):
    """In ../shared/real-logs every `.log` is a run; its SOURCES.md and LABELS.jsonl are not."""
    found = discover_runs(real_logs_dir, quiet_period_s=0)
    assert sorted(e.path.name for e in found.entries) == sorted(p.name for p in real_logs_dir.glob("*.log"))
    assert set(found.skipped) == {"SOURCES.md", "LABELS.jsonl"}


def test_a_folder_run_sums_its_files_and_is_as_new_as_its_newest(tmp_path):
    """A folder's size is the sum of its files and its mtime the newest file's; a dangling link is no entry."""
    (tmp_path / "a-dangling").symlink_to(tmp_path / "gone")
    for name, text, age in (("train.log", "x" * 100, 7200), ("ray/worker.err", "y" * 23, 5000)):
        _touch(tmp_path / "run" / name, text, age_s=age)
    newest = (tmp_path / "run" / "ray" / "worker.err").stat().st_mtime
    [entry] = discover_runs(tmp_path, now=newest + 600).entries  # the default quiet period: 600 s
    assert (entry.run_id, entry.size, entry.mtime, entry.finished) == ("run", 123, newest, True)
    assert not discover_runs(tmp_path, quiet_period_s=600, now=newest + 599).entries[0].finished


def test_end_markers_in_a_gz_tail_and_in_a_folders_largest_logs(tmp_path):
    """A .gz log is read to its tail; a folder's three largest logs are searched, never its .jsonl."""
    crash = b'step:3 - a:1\nTraceback (most recent call last):\n  File "x", line 1\nValueError: boom\n'
    (tmp_path / "crashed.log.gz").write_bytes(gzip.compress(b"step:1 - a:1\n" * 100 + crash))
    _touch(tmp_path / "done" / "driver.log", "step:1 - a:1\n" * 50 + "Final validation metrics: {}\n")
    for i in range(1, 5):  # smaller logs whose names sort after driver.log
        _touch(tmp_path / "done" / f"worker-{i}.err", "warn\n")
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / "driver.log.gz").write_bytes(gzip.compress(b"step:1 - a:1\n" + crash))
    _touch(tmp_path / "live" / "driver.log", "step:1 - a:1\n")
    _touch(tmp_path / "live" / "metrics.jsonl", '{"Final validation metrics": 1}\n' * 50)
    by = {e.run_id: e for e in discover_runs(tmp_path, quiet_period_s=600).entries}
    assert (by["crashed"].form, by["crashed"].end_marker) == ("gz", "final traceback")
    assert by["done"].end_marker == "Final validation metrics"
    assert by["packed"].end_marker == "final traceback"
    assert (by["live"].end_marker, by["live"].finished) == (None, False)


def test_an_archive_root_that_cannot_be_listed_is_an_error(tmp_path):
    """A missing root gives no entries and one error naming it."""
    found = discover_runs(tmp_path / "missing")
    assert found.entries == [] and len(found.errors) == 1
    assert found.errors[0].startswith(f"cannot list archive root {tmp_path / 'missing'}: ")


def test_a_folder_ending_is_read_from_its_logs_not_its_metric_files(tmp_path):
    """Three TensorBoard event files and a JSONL outweigh the driver log, whose tail says the run is done."""
    for i in range(3):
        _touch(tmp_path / "r" / "tb" / f"events.out.tfevents.17000000{i}.node.1.0", "x" * 200_000)
    _touch(tmp_path / "r" / "metrics.jsonl", '{"step": 1}\n' * 20_000)
    _touch(tmp_path / "r" / "train.log", "step:5 - a:1\nFinal validation metrics: {'acc': 0.5}\n")
    (entry,) = discover_runs(tmp_path, quiet_period_s=600).entries
    assert entry.finished and entry.end_marker == "Final validation metrics"


def test_one_run_of_an_archive_is_found_without_reading_the_others(tmp_path, monkeypatch):
    """`only` lists the entries of those run_ids, each as a whole discovery lists it, and reads no other entry:
    what `analyze --run` and a one-run Dagster run pay on an archive of a thousand runs."""
    from pipeline.ingest import discover

    old = 3600
    _touch(tmp_path / "wanted" / "train.log", "step:1 - a:1\n(\"Final validation metrics: {'x': 1}\")\n", age_s=old)
    _touch(tmp_path / "other" / "train.log", "step:1 - a:1\n", age_s=old)
    _touch(tmp_path / "other.log.gz", "", age_s=old)  # an entry named like another run: a collision of `other`s
    _touch(tmp_path / "solo.log", "step:1 - a:1\n", age_s=old)
    _touch(tmp_path / "twin.log", age_s=old)
    _touch(tmp_path / "twin.tar.gz", age_s=old)
    whole = discover_runs(tmp_path)
    walked: list[str] = []
    real_stats = discover._dir_stats
    monkeypatch.setattr(discover, "_dir_stats", lambda path: walked.append(path.name) or real_stats(path))
    read: list[str] = []
    real_tail = discover._tail
    monkeypatch.setattr(discover, "_tail", lambda path, gz: read.append(path.name) or real_tail(path, gz))
    one = discover_runs(tmp_path, only={"wanted"})
    assert one.entries == [e for e in whole.entries if e.run_id == "wanted"]
    assert one.entries[0].end_marker == "Final validation metrics"
    assert walked == ["wanted"] and read == ["train.log"]
    assert one.errors == []
    twins = discover_runs(tmp_path, only={"twin", "solo"})
    assert [e.run_id for e in twins.entries] == ["solo"]
    assert twins.errors == ["run_id 'twin' is given by 2 entries (twin.log, twin.tar.gz): none ingested"]
    none = discover_runs(tmp_path, only={"gone"})
    assert none.entries == [] and none.n_unread == len(whole.entries) == 2
    assert "run_id gone; the archive holds 2 run entries" in no_runs_message(tmp_path, none, {"gone"}, None)
