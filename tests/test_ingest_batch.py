"""A batch of runs' ingest (`pipeline.ingest.batch`): over worker processes it writes what one process writes,
a run too big for the pool is ingested in this process meanwhile, and runs whose worker died are ingested again
here; results come in the batch's order, a failed run's with why."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import psutil
import pyarrow.parquet as pq
from operate_support import fail_ingest_of, write_run

from pipeline.ingest import IngestLimits, discover_runs
from pipeline.ingest import batch as ingest_batch
from pipeline.lake import run_partition_dir

RUNS = {"run-a": 3, "run-b": 5, "run-c": 2, "run-d": 4}  # run -> its steps


def _entries(tmp_path):
    for rid, steps in RUNS.items():
        write_run(tmp_path / "archive", rid, steps=steps)
    return sorted(discover_runs(tmp_path / "archive").entries, key=lambda e: e.run_id)


def _tables(warehouse, rid):
    """A run's log lines and metric values as written."""
    [lines] = run_partition_dir(warehouse, "log_lines", rid).glob("*.parquet")
    [metrics] = run_partition_dir(warehouse, "step_metrics", rid).glob("*.parquet")
    return (pq.read_table(lines).select(["line_no", "text", "kind"]).to_pylist(),
            pq.read_table(metrics).select(["step", "key", "value"]).sort_by([("step", "ascending"),
                                                                          ("key", "ascending")]).to_pylist())


def test_workers_write_what_one_process_writes(tmp_path, monkeypatch):
    """4 runs over 2 spawned workers: each run's lines (one per step) and metrics (3 keys a step) are those
    one process writes, and the results come in the batch's order."""
    entries = _entries(tmp_path)
    limits = IngestLimits()
    alone = list(ingest_batch.ingest_batch(entries, tmp_path / "one", limits, workers=1))
    monkeypatch.setattr(ingest_batch, "MIN_RUNS_FOR_POOL", 2)
    pooled = list(ingest_batch.ingest_batch(entries, tmp_path / "pool", limits, workers=2))
    assert [e.run_id for e, _, _ in pooled] == sorted(RUNS)
    for (entry, result, why), (_, result_alone, _) in zip(pooled, alone, strict=True):
        assert why is None and result.n_lines == RUNS[entry.run_id] == result_alone.n_lines
        lines, metrics = _tables(tmp_path / "pool", entry.run_id)
        assert (lines, metrics) == _tables(tmp_path / "one", entry.run_id)
        assert len(lines) == RUNS[entry.run_id] and len(metrics) == 3 * RUNS[entry.run_id]


class _DeadPool:
    """A process pool whose every worker dies before answering; `sent` lists the runs handed to it."""

    sent: list[str] = []

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, chunk, *args):
        _DeadPool.sent.extend(e.run_id for e in chunk)
        future = Future()
        future.set_exception(BrokenProcessPool("a worker was killed"))
        return future


def test_a_big_run_stays_here_and_runs_of_a_dead_worker_are_ingested_here(tmp_path, monkeypatch):
    """With the pool's workers dying, every run is still ingested (in this process), the one run above the
    size limit among them, and a run whose ingest raises comes back with why, the others going on."""
    entries = _entries(tmp_path)
    biggest = max(entries, key=lambda e: e.size)
    monkeypatch.setattr(_DeadPool, "sent", [])
    monkeypatch.setattr(ingest_batch, "MIN_RUNS_FOR_POOL", 2)
    monkeypatch.setattr(ingest_batch, "MAX_POOLED_BYTES", biggest.size - 1)
    monkeypatch.setattr(ingest_batch, "ProcessPoolExecutor", _DeadPool)
    fail_ingest_of(monkeypatch, "run-c")
    got = {e.run_id: (result, why) for e, result, why in
           ingest_batch.ingest_batch(entries, tmp_path / "wh", IngestLimits(), workers=2)}
    # the big run stays here, and this process keeps a share of the small ones; the rest went to the pool
    assert _DeadPool.sent and set(_DeadPool.sent) <= set(RUNS) - {biggest.run_id}
    assert list(got) == sorted(RUNS)
    assert got["run-c"] == (None, "OSError: [Errno 28] No space left on device")
    for rid in ("run-a", "run-b", "run-d"):
        assert got[rid][1] is None and got[rid][0].n_lines == RUNS[rid]
        assert len(_tables(tmp_path / "wh", rid)[0]) == RUNS[rid]


PARENT = """
import sys
from pipeline.ingest import IngestLimits, discover_runs
from pipeline.ingest.batch import ingest_batch
entries = discover_runs(sys.argv[1], quiet_period_s=0).entries
for _ in ingest_batch(entries, sys.argv[2], IngestLimits(), workers=2):
    pass
"""


def _pool_workers(pid: int) -> list[psutil.Process]:
    """The spawned worker processes started by `pid` (not its resource tracker)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if "spawn_main" in " ".join(c.cmdline())]


def test_workers_end_when_their_parent_is_killed(tmp_path):
    """`kill -9` of a process ingesting 160 runs with a worker beside it: the worker ends within seconds instead of
    finishing its chunk, re-parented, and no partition is written once it is gone."""
    archive, warehouse = tmp_path / "archive", tmp_path / "wh"
    for i in range(160):
        write_run(archive, f"run-{i:03d}", steps=400)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(archive), str(warehouse)],
                              cwd=Path(__file__).resolve().parent.parent)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                len(workers := _pool_workers(parent.pid)) == 1 and len(list(warehouse.glob("runs/run_id=*"))) >= 4):
            time.sleep(0.05)
        assert len(workers) == 1, "the pool's worker did not start"
        parent.kill()
        parent.wait()
        gone, alive = psutil.wait_procs(workers, timeout=5)
        assert alive == [], f"{len(alive)} workers outlived their parent"
        written = len(list(warehouse.glob("runs/run_id=*")))
        assert written < 160
        time.sleep(1)
        assert len(list(warehouse.glob("runs/run_id=*"))) == written
    finally:
        parent.kill()
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
