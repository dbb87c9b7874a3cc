"""Hostile input: special files, links out of the archive, a YAML alias bomb and numbers no column can hold.
Each is skipped or nulled with a problem; the run's other lines, metrics and facts are kept."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import threading
import time
import zipfile
from datetime import datetime

import pytest

from pipeline.ingest import discover_runs
from tests.test_ingest_helpers import ingest_root, ingest_text, values
from tests.test_wandb_tensorboard import WANDB_RUN, _wandb_folder

STEPS = "".join(f"step:{i} - actor/entropy:0.{i} - timing_s/step:1{i}.0\n" for i in range(1, 4))


def _within(seconds: float, fn, *args):
    """`fn(*args)`, failing the test if it has not returned within `seconds` (a blocked read never does)."""
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("value", fn(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{fn.__name__} still running after {seconds} s: blocked on a read?"
    return out["value"]


def _problems(run) -> str:
    return "\n".join(run.run["problems"])


def test_fifo_and_device_in_a_run_folder_are_skipped_never_opened(tmp_path):
    """`mkfifo run/worker-1.err` would block discovery's tail read and ingest for ever; a character device
    (/dev/zero's numbers) would be read without end. Both are skipped, with a problem each."""
    run = tmp_path / "archive" / "run-f"
    run.mkdir(parents=True)
    (run / "train.log").write_text(STEPS)
    os.mkfifo(run / "worker-1.err")
    os.mknod(run / "zero.log", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    found = _within(20, discover_runs, tmp_path / "archive", 0)
    assert [e.run_id for e in found.entries] == ["run-f"]
    runs = _within(20, ingest_root, tmp_path / "archive", tmp_path / "wh")
    got = runs["run-f"]
    assert values(got) == {(s, k): v for s in (1, 2, 3)
                           for k, v in (("actor/entropy", s / 10), ("timing_s/step", 10 + s))}
    assert {ln["file"] for ln in got.lines} == {"train.log"}
    assert "worker-1.err: a FIFO, not a regular file: skipped" in _problems(got)
    assert "zero.log: a character device, not a regular file: skipped" in _problems(got)


def test_a_symbolic_link_at_the_archive_root_is_refused(tmp_path):
    """A link at the root to a folder or file outside the archive (a deployment's .env) is not followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".env").write_text("SMTP_PASSWORD=hunter2\n")
    (outside / "deploy.log").write_text("DB_TOKEN=abc\n")
    root = tmp_path / "archive"
    root.mkdir()
    (root / "good.log").write_text(STEPS)
    (root / "evil-run").symlink_to(outside)
    (root / "evil-file.log").symlink_to(outside / "deploy.log")
    found = discover_runs(root, quiet_period_s=0)
    assert [e.run_id for e in found.entries] == ["good"]
    assert sorted(found.errors) == [
        "evil-file.log: a symbolic link: refused, not followed (a run must lie inside the archive)",
        "evil-run: a symbolic link: refused, not followed (a run must lie inside the archive)",
    ]
    runs = ingest_root(root, tmp_path / "wh")
    assert list(runs) == ["good"]
    assert not (tmp_path / "wh" / "log_lines" / "run_id=evil-run").exists()


def _alias_bomb(levels: int) -> str:
    """A W&B config.yaml whose one value names 10**levels strings through YAML aliases."""
    lines = ['a0: &a0 "lol"']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\ntrainer: {{value: {{bomb: *a{levels}}}}}\n"


def test_a_yaml_alias_bomb_in_the_wandb_config_is_not_expanded(tmp_path):
    """519 bytes naming 10^8 strings (13.7 GB as JSON): refused as the config, with a problem, at once."""
    root = _wandb_folder(tmp_path / "archive")
    bomb = _alias_bomb(8)
    assert len(bomb) < 600
    (root / "wandb-run" / "wandb" / WANDB_RUN / "files" / "config.yaml").write_text(bomb)
    started = time.perf_counter()
    run = ingest_root(root, tmp_path / "wh")["wandb-run"]
    assert time.perf_counter() - started < 30
    assert run.run["config_json"] is None and run.run["experiment_name"] is None
    assert "config.yaml: W&B config holds more than 1,000,000 values written out" in _problems(run)
    assert run.run["host"] == "gpu-node-17" and values(run)[(12, "timing_s/gen")] == 31.5


@pytest.mark.parametrize("bad", ["inf", "99999999999999999999", "1e300"])
def test_a_config_number_no_column_can_hold_becomes_null(tmp_path, real_logs_dir, bad):
    """REAL/02's config dump with `'n_gpus_per_node': <bad>` (line 136 prints 1): the run is ingested, that
    fact null with a problem, the others as the dump prints them."""
    log = real_logs_dir / "02_maze_ppo_reward_fn_notimplemented.log"
    text = log.read_text()
    assert text.count("'n_gpus_per_node': 1,") == 1
    root = tmp_path / "archive"
    root.mkdir()
    (root / "run-02.log").write_text(text.replace("'n_gpus_per_node': 1,", f"'n_gpus_per_node': {bad},"))
    run = ingest_root(root, tmp_path / "wh")["run-02"]
    assert run.run["n_gpus_per_node"] is None
    assert "config trainer.n_gpus_per_node = " in _problems(run) and "out of range: kept as null" in _problems(run)
    assert (run.run["nnodes"], run.run["project_name"], run.run["experiment_name"]) == (1, "verl_examples", "gsm8k")
    assert run.run["n_lines"] == len(text.splitlines())


def test_wandb_times_and_steps_out_of_range_become_null(tmp_path):
    """`_timestamp` 1e20, `_runtime` 1e300, `_step` 10^20 and a start before year 1 in UTC: each fact null with
    a problem; the host, the final metrics and the console's metrics are kept."""
    summary = {"actor/entropy": 0.41, "_timestamp": 1e20, "_runtime": 1e300, "_step": 99999999999999999999}
    metadata = {"startedAt": "0001-01-01T00:00:00+01:00", "host": "gpu-node-17"}
    run = ingest_root(_wandb_folder(tmp_path / "archive", summary, metadata), tmp_path / "wh")["wandb-run"]
    r = run.run
    assert (r["started_at"], r["runtime_s"], r["final_step"], r["first_ts"], r["last_ts"]) == (None,) * 5
    assert (r["host"], json.loads(r["final_metrics_json"])) == ("gpu-node-17", {"actor/entropy": 0.41})
    for what in ("startedAt '0001-01-01T00:00:00+01:00'", "_runtime '1e+300'", "_timestamp '1e+20'",
                 "_step '99999999999999999999'"):
        assert f"W&B {what} is out of range: kept as null" in _problems(run)
    assert len(values(run)) == 12 * 5


def test_a_step_number_past_int64_keeps_the_other_steps_of_its_block(tmp_path):
    """`step:99999999999999999999` (no int64 holds it) used to fail the parse of its whole 16 MB block: now that
    line's pairs are reported as without a step, and the block's other steps are kept."""
    text = STEPS + "step:99999999999999999999 - actor/entropy:0.9 - timing_s/step:19.0\n" + \
        "step:4 - actor/entropy:0.4 - timing_s/step:14.0\n"
    run = ingest_text(tmp_path, text, name="run-big-step.log")
    assert sorted({s for s, _ in values(run)}) == [1, 2, 3, 4]
    assert values(run)[(4, "timing_s/step")] == 14.0
    assert "run-big-step.log:4: metric pairs without a step number" in _problems(run)
    assert "kept unparsed" not in _problems(run)


def test_a_tensorboard_record_with_a_wall_time_out_of_range_keeps_the_rest(tmp_path):
    """One event's wall_time of 1e20 s (no datetime holds it) used to end the file's read: the event's value is
    kept without a time, the later events are read, with a problem."""
    pytest.importorskip("tensorboard")
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = tmp_path / "archive" / "tb-run" / "tensorboard_log"
    writer = EventFileWriter(str(logdir))
    for step in range(1, 6):
        value = [summary_pb2.Summary.Value(tag="actor/entropy", simple_value=step / 8)]
        wall = 1e20 if step == 2 else 1_760_000_000 + 60 * step
        writer.add_event(event_pb2.Event(summary=summary_pb2.Summary(value=value), step=step, wall_time=wall))
    writer.close()
    run = ingest_root(tmp_path / "archive", tmp_path / "wh")["tb-run"]
    assert values(run) == {(s, "actor/entropy"): s / 8 for s in range(1, 6)}
    assert "1 TensorBoard event(s) with a wall_time out of range" in _problems(run)
    assert run.run["last_ts"] == datetime(2025, 10, 9, 8, 58, 20)  # `date -u -d @1760000300`


def test_zip_links_and_tar_fifos_and_devices_are_refused_with_a_problem(tmp_path):
    """A zip member stored as a symbolic link (its text is the target: /etc/passwd) is not read as a log line;
    tar FIFO and device members are skipped, each with a problem."""
    root = tmp_path / "archive"
    root.mkdir()
    with zipfile.ZipFile(root / "run-z.zip", "w") as zf:
        link = zipfile.ZipInfo("run-z/passwd.log")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("run-z/train.log", STEPS)
    with tarfile.open(root / "run-t.tar.gz", "w:gz") as tar:
        for name, kind in (("run-t/pipe.log", tarfile.FIFOTYPE), ("run-t/zero.log", tarfile.CHRTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            tar.addfile(info)
        info = tarfile.TarInfo("run-t/train.log")
        info.size = len(STEPS)
        tar.addfile(info, io.BytesIO(STEPS.encode()))
    runs = ingest_root(root, tmp_path / "wh")
    for rid in ("run-z", "run-t"):
        assert {ln["file"] for ln in runs[rid].lines} == {"train.log"}
        assert len(values(runs[rid])) == 6
    assert "archive member 'run-z/passwd.log' is a symbolic link, not a regular file: refused" in _problems(runs["run-z"])
    assert "archive member 'run-t/pipe.log' is a FIFO, not a regular file: skipped" in _problems(runs["run-t"])
    assert "archive member 'run-t/zero.log' is a device, not a regular file: skipped" in _problems(runs["run-t"])
