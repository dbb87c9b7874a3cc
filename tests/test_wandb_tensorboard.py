"""W&B run folders and TensorBoard event files, built in each tool's own format, read as runs.

W&B: `wandb/offline-run-<date>_<time>-<id>/files/` with output.log, config.yaml, wandb-summary.json
(final values, `_step`, `_runtime`, `_timestamp`, `_wandb.runtime`) and wandb-metadata.json (`startedAt`
in UTC, `host`), as wandb writes them. TensorBoard: event files written by the `tensorboard` package's own
EventFileWriter with `Summary.Value(simple_value=...)`, which is what `SummaryWriter.add_scalar` emits.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import date, datetime
from pathlib import Path

import duckdb
import pytest

from pipeline import derive, lake
from tests.test_ingest_helpers import ingest_root, values

pytest.importorskip("tensorboard")
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402
from tensorboard.util.tensor_util import make_tensor_proto  # noqa: E402

WANDB_RUN = "offline-run-20251104_063305-gkn3gtx6"
METADATA = {
    "os": "Linux-5.15.0-105-generic-x86_64-with-glibc2.35",
    "python": "CPython 3.10.12",
    "startedAt": "2025-11-04T06:33:05.123456Z",
    "program": "-m verl.trainer.main_ppo",
    "args": ["algorithm.adv_estimator=grpo", "trainer.logger=['console','wandb']"],
    "host": "gpu-node-17",
    "executable": "/usr/bin/python3",
    "cpu_count": 64,
    "gpu": "NVIDIA H100 80GB HBM3",
    "gpu_count": 8,
}
SUMMARY = {"actor/entropy": 0.41, "actor/pg_loss": -0.002, "critic/score/mean": 0.62, "timing_s/gen": 31.5,
           "_timestamp": 1762241390.5, "_runtime": 3405.377, "_step": 12, "_wandb": {"runtime": 3405}}
CONFIG_YAML = """_wandb:
    value:
        cli_version: 0.19.8
trainer:
    value:
        experiment_name: wandb-offline
        total_training_steps: 12
"""


def _wandb_folder(root: Path, summary: dict = SUMMARY, metadata: dict = METADATA) -> Path:
    files = root / "wandb-run" / "wandb" / WANDB_RUN / "files"
    files.mkdir(parents=True)
    steps = [f"step:{s} - actor/entropy:{0.5 - s * 0.0075:.4f} - critic/score/mean:{0.5 + s * 0.01:.3f}"
             f" - timing_s/gen:{30 + s * 0.125} - timing_s/update_actor:12.0 - timing_s/step:{45 + s * 0.125}"
             for s in range(1, 13)]
    (files / "output.log").write_text("\n".join(steps) + "\n")
    (files / "config.yaml").write_text(CONFIG_YAML)
    (files / "wandb-summary.json").write_text(json.dumps(summary))
    (files / "wandb-metadata.json").write_text(json.dumps(metadata, indent=4))
    return root


def _tensorboard_run(root: Path, slow_from: int = 30, n: int = 40) -> Path:
    """A run that logged to TensorBoard only: verl's metric keys, gen four times slower from `slow_from`."""
    logdir = root / "tb-run" / "tensorboard_log" / "proj" / "exp"
    writer = EventFileWriter(str(logdir))
    rng = random.Random(5)
    for step in range(1, n + 1):
        gen = (120.0 if step >= slow_from else 30.0) + rng.random()
        scalars = {"timing_s/gen": gen, "timing_s/old_log_prob": 5 + rng.random(),
                   "timing_s/update_actor": 12 + rng.random(), "timing_s/step": gen + 20,
                   "actor/entropy": 0.5 - step * 0.001, "critic/score/mean": 0.1 + step * 0.01,
                   "actor/pg_loss": 0.01 * rng.random(), "actor/grad_norm": 1 + rng.random()}
        value = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in scalars.items()]
        writer.add_event(event_pb2.Event(summary=summary_pb2.Summary(value=value), step=step,
                                         wall_time=1_760_000_000 + 60 * step))
    writer.close()
    return root


def test_wandb_folder_is_one_run_with_start_host_runtime_and_final_values(tmp_path):
    run = ingest_root(_wandb_folder(tmp_path / "archive"), tmp_path / "wh")["wandb-run"]
    r = run.run
    assert (r["host"], r["wandb_run"], r["final_step"]) == ("gpu-node-17", WANDB_RUN, 12)
    assert r["started_at"] == datetime(2025, 11, 4, 6, 33, 5, 123456)
    # the console capture has no times: the run spans W&B's start to its last log (`date -u -d @1762241390.5`)
    assert r["first_ts"] == datetime(2025, 11, 4, 6, 33, 5, 123456)
    assert r["last_ts"] == datetime(2025, 11, 4, 7, 29, 50, 500000)
    assert r["runtime_s"] == 3405.377
    assert json.loads(r["final_metrics_json"]) == {"actor/entropy": 0.41, "actor/pg_loss": -0.002,
                                                   "critic/score/mean": 0.62, "timing_s/gen": 31.5}
    assert r["experiment_name"] == "wandb-offline" and r["total_training_steps"] == 12
    assert values(run)[(12, "timing_s/gen")] == 31.5
    assert r["n_files"] == 4 and not r["problems"]


def test_wandb_metadata_of_older_clients_and_broken_files(tmp_path):
    old = {**METADATA, "startedAt": "2024-02-01T10:00:00.5"}  # wandb < 0.17: isoformat() of utcnow, no Z
    summary = {"_runtime": 12.0, "_step": 3}  # no _timestamp: the end is the start plus the runtime
    run = ingest_root(_wandb_folder(tmp_path / "a", summary, old), tmp_path / "wh")["wandb-run"]
    assert run.run["first_ts"] == datetime(2024, 2, 1, 10, 0, 0, 500000)
    assert run.run["last_ts"] == datetime(2024, 2, 1, 10, 0, 12, 500000)
    assert run.run["final_metrics_json"] is None
    broken = _wandb_folder(tmp_path / "b")
    (broken / "wandb-run" / "wandb" / WANDB_RUN / "files" / "wandb-summary.json").write_text('{"_step": 3,')
    run = ingest_root(broken, tmp_path / "wh2")["wandb-run"]
    assert run.run["host"] == "gpu-node-17" and run.run["runtime_s"] is None
    assert any("wandb-summary.json: W&B file could not be parsed" in p for p in run.run["problems"])


def test_tensorboard_scalars_become_step_metrics(tmp_path):
    root = _tensorboard_run(tmp_path / "archive", n=5)
    logdir = root / "tb-run" / "tensorboard_log" / "proj" / "exp"
    # a TF2-style writer stores a scalar as a 0-d tensor
    writer = EventFileWriter(str(logdir), filename_suffix=".v2")
    tensor = summary_pb2.Summary.Value(tag="val-core/acc", tensor=make_tensor_proto(0.75))
    writer.add_event(event_pb2.Event(summary=summary_pb2.Summary(value=[tensor]), step=5, wall_time=1_760_000_400))
    writer.close()
    run = ingest_root(root, tmp_path / "wh")["tb-run"]
    v = values(run)
    assert v[(5, "val-core/acc")] == 0.75
    assert v[(3, "actor/entropy")] == pytest.approx(0.497, rel=1e-6)  # stored as float32 by TensorBoard
    assert {m["source"] for m in run.metrics} == {"tensorboard"}
    assert len(run.metrics) == 5 * 8 + 1
    assert run.lines == [] and run.run["n_lines"] == 0 and not run.run["problems"]
    assert run.run["first_ts"] == datetime(2025, 10, 9, 8, 54, 20)  # `date -u -d @1760000060`
    assert run.run["last_ts"] == datetime(2025, 10, 9, 9, 0, 0)


def test_tensorboard_without_the_extra_is_a_problem_not_a_crash(tmp_path, monkeypatch):
    from pipeline.ingest import tensorboard

    monkeypatch.setattr(tensorboard, "_loader", lambda: None)
    run = ingest_root(_tensorboard_run(tmp_path / "archive", n=3), tmp_path / "wh")["tb-run"]
    assert run.metrics == []
    assert any("install verl-health[tensorboard]" in p for p in run.run["problems"])


@pytest.mark.slow
def test_wandb_and_tensorboard_only_runs_get_reports_with_phases_and_anomalies(tmp_path):
    from pipeline.defs.analysis import analyze_archive

    archive = _tensorboard_run(_wandb_folder(tmp_path / "archive"))
    stamp = time.time() - 3600
    for entry in archive.iterdir():
        os.utime(entry, (stamp, stamp))
    out = analyze_archive(archive, tmp_path / "wh", tmp_path / "rep", day=date(2026, 11, 30))
    assert sorted(out.run_ids) == ["tb-run", "wandb-run"]
    con = duckdb.connect()
    wh = tmp_path / "wh"

    def q(sql: str) -> list:
        return con.execute(sql.replace("T(", f"read_parquet('{wh}/").replace(")T", "/*/*.parquet', hive_partitioning=true)")).fetchall()

    assert q("select run_id, last_step from T(run_summary)T order by run_id") == [("tb-run", 40), ("wandb-run", 12)]
    phases = dict(q("select run_id, count(*) from T(step_phases)T where gen is not null group by 1"))
    assert phases == {"tb-run": 40, "wandb-run": 12}
    flagged = [s for (s,) in q("select step from T(step_anomalies)T where run_id = 'tb-run' and is_anomaly"
                               " and anomaly_class = 'gen_slowdown' order by step")]
    assert flagged and min(flagged) >= 30, flagged
    for rid in ("tb-run", "wandb-run"):
        assert rid in (tmp_path / "rep" / "runs" / f"{rid}.html").read_text()


def test_a_wandb_directory_is_a_folder_of_runs(tmp_path):
    """The archive is W&B's own `wandb/` directory: each run folder is a run (its `latest-run` link is not), read
    with its files/ beside W&B's debug logs and binary transaction log, which are no console."""
    wandb = tmp_path / "archive" / "wandb"
    for folder, host in ((WANDB_RUN, "gpu-node-17"), ("run-20251105_101500-x9k2m4pq", "gpu-node-18")):
        files = wandb / folder / "files"
        files.mkdir(parents=True)
        (files / "output.log").write_text("".join(f"step:{s} - actor/entropy:0.5 - timing_s/step:40.{s}\n"
                                                 for s in range(1, 4)))
        (files / "config.yaml").write_text(CONFIG_YAML)
        (files / "wandb-summary.json").write_text(json.dumps(SUMMARY))
        (files / "wandb-metadata.json").write_text(json.dumps({**METADATA, "host": host}, indent=4))
        (wandb / folder / "logs").mkdir()
        (wandb / folder / "logs" / "debug-internal.log").write_text(
            "".join(f"2025-11-04 06:33:{s:02d},000 ERROR   HandlerThread:91 [internal.py:wandb_internal():99] "
                    f"retry {s}\n" for s in range(30))
            # an offline run's uploader failing: W&B's business, not the training run's ending
            + "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.wandb.ai', port=443): "
              "Max retries exceeded with url: /graphql\n")
        (wandb / folder / f"run-{folder.rsplit('-', 1)[1]}.wandb").write_bytes(b":W&B\x00\x01\xff\x00ERROR\n" * 50)
    (wandb / "latest-run").symlink_to(wandb / "run-20251105_101500-x9k2m4pq")
    runs = ingest_root(tmp_path / "archive", tmp_path / "wh")
    assert sorted(runs) == ["offline-run-20251104_063305-gkn3gtx6", "run-20251105_101500-x9k2m4pq"]
    run = runs["run-20251105_101500-x9k2m4pq"]
    assert (run.run["host"], run.run["experiment_name"], run.run["final_step"]) == ("gpu-node-18", "wandb-offline", 12)
    assert {ln["file"] for ln in run.lines} == {"files/output.log", "files/config.yaml", "files/wandb-summary.json",
                                                "files/wandb-metadata.json", "logs/debug-internal.log"}
    derive.derive_run_tables(tmp_path / "wh", sorted(runs))
    con = duckdb.connect()
    got = con.execute("select run_id, last_step, failure_class, failure_phase"
                      f" from {lake.table_source(tmp_path / 'wh', 'run_summary')} order by run_id").fetchall()
    # output.log is the console: the run was past its start-up (W&B's longer debug log has no steps)
    assert got == [("offline-run-20251104_063305-gkn3gtx6", 3, "no_outcome", None),
                   ("run-20251105_101500-x9k2m4pq", 3, "no_outcome", None)]


def _events(logdir: Path, steps: range, scalars: dict[str, float], suffix: str = "") -> None:
    writer = EventFileWriter(str(logdir), filename_suffix=suffix)
    for step in steps:
        value = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in scalars.items()]
        writer.add_event(event_pb2.Event(summary=summary_pb2.Summary(value=value), step=step,
                                         wall_time=1_760_000_000 + step))
    writer.close()


def test_console_values_win_and_tensorboard_adds_what_the_console_lacks(tmp_path):
    root = tmp_path / "archive"
    (root / "r").mkdir(parents=True)
    (root / "r" / "train.log").write_text("step:1 - actor/entropy:0.5\nstep:2 - actor/entropy:0.25\n")
    _events(root / "r" / "tb", range(1, 3), {"actor/entropy": 0.125, "perf/mfu/actor": 0.375})
    run = ingest_root(root, tmp_path / "wh")["r"]
    got = {(m["step"], m["key"]): (m["value"], m["source"]) for m in run.metrics}
    assert got == {(1, "actor/entropy"): (0.5, "console"), (2, "actor/entropy"): (0.25, "console"),
                   (1, "perf/mfu/actor"): (0.375, "tensorboard"), (2, "perf/mfu/actor"): (0.375, "tensorboard")}


def test_a_resumed_runs_later_event_file_wins(tmp_path):
    """A resumed run writes a new event file (its name carries the start time) repeating the steps since
    the checkpoint: those steps take the later file's values."""
    logdir = tmp_path / "archive" / "r" / "tb"
    _events(logdir, range(1, 6), {"critic/score/mean": 0.25})
    first = next(logdir.iterdir())
    first.rename(logdir / first.name.replace("events.out.tfevents.", "events.out.tfevents.0"))  # the older start
    _events(logdir, range(4, 7), {"critic/score/mean": 0.75})
    run = ingest_root(tmp_path / "archive", tmp_path / "wh")["r"]
    assert len(run.metrics) == 6  # one value per step
    assert values(run) == {(1, "critic/score/mean"): 0.25, (2, "critic/score/mean"): 0.25, (3, "critic/score/mean"): 0.25,
                           (4, "critic/score/mean"): 0.75, (5, "critic/score/mean"): 0.75, (6, "critic/score/mean"): 0.75}


def test_simulated_wandb_runs_take_their_times_and_last_step_from_wandb(sim_fleet, tmp_path):
    """Every W&B capture of the simulated fleet: its start, end and last step as the simulator's labels say."""
    from pipeline.ingest import discover_runs, ingest_run

    wandb_runs = {rid: lab for rid, lab in sim_fleet.labels["runs"].items() if lab["capture"] == "wandb"}
    assert wandb_runs
    for entry in discover_runs(sim_fleet.archive, quiet_period_s=0).entries:
        if entry.run_id in wandb_runs:
            ingest_run(entry, tmp_path / "wh")
    con = duckdb.connect()
    got = {r[0]: r[1:] for r in con.execute(
        f"select run_id, first_ts, last_ts, final_step from {lake.table_source(tmp_path / 'wh', 'runs')}").fetchall()}
    assert set(got) == set(wandb_runs)
    for rid, lab in wandb_runs.items():
        first, last, step = got[rid]
        assert (first.replace(microsecond=0).isoformat(), last.replace(microsecond=0).isoformat(), step) == (
            lab["first_ts"], lab["last_ts"], lab["last_step"]), rid
