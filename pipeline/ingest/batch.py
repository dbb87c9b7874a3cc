"""A batch of runs' ingest: in this process, or spread over worker processes for a large batch of small runs.

A spawned worker spends about 0.7 CPU-s importing ingest before its first run, and a small run costs 30-50 ms,
so workers pay off from a few dozen runs on idle cores; this process takes a share beside them (one worker on two
cores); under the deployment's two concurrent range runs the workers of one compete with the other's, so they
start only from MIN_RUNS_FOR_POOL runs. Measured on 2 cores
(one process / two workers): 100 simulated runs 3.6 / 2.8-3.1 s, 230 real-log runs 6.3-6.5 / 4.2-4.9 s,
1,000 simulated runs 32-41 / 16-19 s. A run larger than MAX_POOLED_BYTES is ingested in this process
meanwhile: it parses on two threads already, and two at once in workers would hold two big runs' buffers.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pipeline.credentials import mask_secrets

from .discover import RunEntry
from .readers import IngestLimits
from .run import IngestResult, ingest_run

MIN_RUNS_FOR_POOL = 100
MAX_POOLED_BYTES = 64 * 2**20
PARENT_POLL_S = 0.2  # how often a worker checks that the process that started it is alive

# (run_id, what its ingest wrote, or None and why it failed)
Outcome = tuple[str, IngestResult | None, str | None]


def _ingest_one(entry: RunEntry, warehouse: str | Path, limits: IngestLimits) -> Outcome:
    try:
        return entry.run_id, ingest_run(entry, warehouse, limits), None
    except Exception as exc:  # one run's failure (a full disk, a bug) must not stop the others
        return entry.run_id, None, mask_secrets(f"{type(exc).__name__}: {exc}")


def _exit_with_parent(parent: int) -> None:
    """A worker's initializer: end the worker as soon as `parent` is gone. Killed (`kill -9`), the parent
    cannot stop its workers, which would be re-parented and go on writing partitions a rerun also writes."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _ingest_chunk(entries: list[RunEntry], warehouse: str | Path, limits: IngestLimits) -> list[Outcome]:
    return [_ingest_one(entry, warehouse, limits) for entry in entries]


def _deal(entries: list[RunEntry], n: int, first_load: int = 0) -> list[list[RunEntry]]:
    """`entries` in `n` chunks of about the same bytes, the first starting with `first_load` bytes already: largest
    first, each to the lightest chunk so far."""
    chunks: list[list[RunEntry]] = [[] for _ in range(n)]
    loads = [first_load] + [0] * (n - 1)
    for entry in sorted(entries, key=lambda e: e.size, reverse=True):
        i = loads.index(min(loads))
        chunks[i].append(entry)
        loads[i] += entry.size
    return chunks


def ingest_batch(entries: list[RunEntry], warehouse: str | Path, limits: IngestLimits,
                 workers: int | None = None) -> Iterator[tuple[RunEntry, IngestResult | None, str | None]]:
    """Ingest every entry (`ingest_run`); yield (entry, result, None), or (entry, None, why) for a run whose ingest
    raised, in the order of `entries`. Runs whose worker died are ingested again in this process."""
    workers = workers or os.cpu_count() or 1
    small = [e for e in entries if e.size <= MAX_POOLED_BYTES]
    pooled = small if workers > 1 and len(small) >= MIN_RUNS_FOR_POOL else []
    pooled_ids = {e.run_id for e in pooled}
    here = [e for e in entries if e.run_id not in pooled_ids]
    done: dict[str, Outcome] = {}
    if pooled:
        # this process takes one share itself, after the big runs: a worker more would only wait beside it
        # (and hold 200 MB: 1,000-run parts peaked at 1.1 GB with two workers beside this process)
        mine, *theirs = _deal(pooled, workers, first_load=sum(e.size for e in here))
        here += mine
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx, initializer=_exit_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            futures = [pool.submit(_ingest_chunk, chunk, warehouse, limits) for chunk in theirs if chunk]
            done.update((e.run_id, _ingest_one(e, warehouse, limits)) for e in here)
            for future in futures:
                try:
                    done.update((outcome[0], outcome) for outcome in future.result())
                except BrokenProcessPool:
                    continue
        here = [e for e in pooled if e.run_id not in done]
    done.update((e.run_id, _ingest_one(e, warehouse, limits)) for e in here)
    for entry in entries:
        _, result, why = done[entry.run_id]
        yield entry, result, why
