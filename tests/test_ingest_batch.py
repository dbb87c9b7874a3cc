"""A batch of runs' ingest (`pipeline.ingest.batch`): over worker processes it writes what one process writes,
a run too big for the pool is ingested in this process meanwhile, and runs whose worker died are ingested again
here; results come in the batch's order, a failed run's with why."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

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
    assert sorted(_DeadPool.sent) == sorted(set(RUNS) - {biggest.run_id})
    assert list(got) == sorted(RUNS)
    assert got["run-c"] == (None, "OSError: [Errno 28] No space left on device")
    for rid in ("run-a", "run-b", "run-d"):
        assert got[rid][1] is None and got[rid][0].n_lines == RUNS[rid]
        assert len(_tables(tmp_path / "wh", rid)[0]) == RUNS[rid]
