"""Role log files: a run folder's files told apart by the process that wrote them, and a root cause that only
a Ray worker's own log names attributed to that file."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline import derive, lake
from pipeline.ingest.roles import role_of
from tests.test_ingest_helpers import ingest_root

WORKER = "ray_logs/worker-5a1e8c9b7d6f4e3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c-01000000-3301.err"
# the driver's console: the run folder's longest log, as a driver's is
DRIVER_STEPS = "".join(f"(main_task pid=2001) step:{s} - actor/pg_loss:0.0{s} - timing_s/gen:3{s}.0 - timing_s/step:5{s}.0\n"
                       for s in range(1, 9))
# what the driver sees when a worker process dies: the actor is gone, the reason is in the worker's .err
DRIVER_DEATH = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/verl/verl/trainer/main_ppo.py", line 64, in main\n'
    "    run_ppo(config)\n"
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
    "\tpid: 3301\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR\n"
)
WORKER_OOM = (
    ":job_id:01000000\n"
    ":actor_name:WorkerDict\n"
    "Traceback (most recent call last):\n"
    '  File "/workspace/verl/verl/workers/fsdp_workers.py", line 812, in compute_log_prob\n'
    "    output = self.actor.compute_log_prob(data=data)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.62 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 2.10 GiB is free.\n"
)
OTHER_FILES = {
    "ray_logs/raylet.out": "[2025-11-04 10:09:00,000 W 2990 2990] (raylet) node_manager.cc:1100: worker 3301 exited\n",
    "vllm_server.log": "INFO 11-04 10:00:01 [api_server.py:1000] vLLM API server version 0.8.5\n",
    "slurm-88123.out": "srun: job 88123 queued and waiting for resources\n",
}


@pytest.mark.parametrize("name, role", [
    ("train.log", "console"),
    ("wandb/run-20251104_063305-gkn3gtx6/files/output.log", "console"),
    ("logs/worker-5a1e8c9b7d6f4e3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c-01000000-3301.out", "ray_worker"),
    ("session_latest/logs/python-core-worker-0a1b2c3d4e5f_4412.log", "ray_worker"),
    ("ray_logs/raylet.out", "raylet"),
    ("raylet.err", "raylet"),
    ("logs/gcs_server.out", "ray_system"),
    ("logs/dashboard.log", "ray_system"),
    ("vllm_server.log", "inference_server"),
    ("sglang_server_rank0.log", "inference_server"),
    ("slurm-88123.out", "slurm"),
    ("slurm-88123_4.err", "slurm"),
    ("wandb/run-20251104_063305-gkn3gtx6/files/wandb-summary.json", "logger_files"),
    ("tb/events.out.tfevents.1762241390.node.1234.0", "tensorboard"),
    ("metrics.jsonl", "metrics_jsonl"),
    ("worker_notes.txt", "console"),
])
def test_role_of_a_file_by_its_name(name, role):
    assert role_of(name) == role


def _run_folder(root: Path, driver: str, worker: str) -> Path:
    run = root / "run-r"
    for rel, text in {"driver.log": driver, WORKER: worker, **OTHER_FILES}.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    return root


def _summary(wh: Path) -> dict:
    derive.derive_run_tables(wh, ["run-r"])
    con = duckdb.connect()
    cur = con.execute(f"select * from {lake.table_source(wh, 'run_summary')}")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def test_files_are_listed_with_their_roles(tmp_path):
    run = ingest_root(_run_folder(tmp_path / "a", DRIVER_STEPS + DRIVER_DEATH, WORKER_OOM), tmp_path / "wh")["run-r"]
    roles = {r["file"]: r["role"] for r in run.run["file_roles"]}
    assert roles == {"driver.log": "console", WORKER: "ray_worker", "ray_logs/raylet.out": "raylet",
                     "vllm_server.log": "inference_server", "slurm-88123.out": "slurm"}


def test_a_cause_only_a_worker_file_names_is_the_root_cause(tmp_path):
    ingest_root(_run_folder(tmp_path / "a", DRIVER_STEPS + DRIVER_DEATH, WORKER_OOM), tmp_path / "wh")
    s = _summary(tmp_path / "wh")
    assert (s["failure_class"], s["root_cause_file"], s["root_cause_line_no"]) == ("cuda_oom", WORKER, 6)
    assert s["root_cause_text"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert s["failure_phase"] == "old_log_prob"
    assert role_of(s["root_cause_file"]) == "ray_worker"


def test_a_worker_error_the_driver_never_reported_is_no_root_cause(tmp_path):
    """The worker's OOM was caught (the driver went on and printed no failure): the run did not die of it."""
    ingest_root(_run_folder(tmp_path / "a", DRIVER_STEPS, WORKER_OOM), tmp_path / "wh")
    s = _summary(tmp_path / "wh")
    assert s["failure_class"] != "cuda_oom" and s["root_cause_file"] != WORKER


def test_a_worker_log_of_an_earlier_attempt_is_no_root_cause(tmp_path):
    """The OOM was the first attempt's (the day before the resume the driver log shows); the final attempt's
    actor died for a reason no file names."""
    first = "".join(f"2025-11-03 10:0{s}:00,000 INFO step:{s} - actor/pg_loss:0.0{s} - timing_s/step:5{s}.0\n"
                    for s in range(1, 9))
    resumed = "".join(f"2025-11-04 09:0{s}:00,000 INFO step:{s} - actor/pg_loss:0.0{s} - timing_s/step:5{s}.0\n"
                      for s in range(5, 9))
    worker = WORKER_OOM.replace("torch.OutOfMemoryError", "2025-11-03 10:09:00,000 torch.OutOfMemoryError")
    ingest_root(_run_folder(tmp_path / "a", first + resumed + DRIVER_DEATH, worker), tmp_path / "wh")
    s = _summary(tmp_path / "wh")
    assert (s["failure_class"], s["root_cause_file"]) == ("ray_actor_died", "driver.log")
