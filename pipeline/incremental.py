"""Incremental analysis: skip runs whose archive entry has not changed since they were last analysed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pipeline import tables
from pipeline.lake import run_partition_dir

INGEST_TABLES = tables.names(writer=tables.INGEST)  # what ingest writes per run
# A Dagster run tag: ingest every requested run again, even one whose archive entry has not changed.
REINGEST_TAG = "verl-health/reingest"
MTIME_TOLERANCE_S = 1e-3
# What `runs.ingest_version` records; a run ingested by an older version is ingested again.
INGEST_VERSION = 4  # 4: W&B run facts, file roles, TensorBoard scalars (event files no longer read as text)


def recorded_source(warehouse: str | Path, run_id: str) -> tuple[str, float | None] | None:
    """The (source_path, mtime as epoch seconds) the `runs` table recorded at ingest, or None (also when
    an older ingest version wrote it)."""
    part = run_partition_dir(warehouse, "runs", run_id) / "part-0.parquet"
    if not part.is_file():
        return None
    parquet = pq.ParquetFile(part)
    if "ingest_version" not in parquet.schema_arrow.names:
        return None
    row = parquet.read(columns=["source_path", "mtime", "ingest_version"]).to_pylist()
    if not row or row[0]["ingest_version"] != INGEST_VERSION:
        return None
    mtime = row[0]["mtime"]
    # ingest writes datetime.fromtimestamp(entry.mtime): naive local time, so .timestamp() inverts it.
    return row[0]["source_path"], mtime.timestamp() if mtime is not None else None


def ingest_is_current(entry, warehouse: str | Path) -> bool:
    """True when the lake holds `entry` as it is now: same path and mtime, every ingest table written."""
    recorded = recorded_source(warehouse, entry.run_id)
    if recorded is None or recorded[0] != str(entry.path) or recorded[1] is None:
        return False
    if abs(recorded[1] - entry.mtime) > MTIME_TOLERANCE_S:
        return False
    return all(run_partition_dir(warehouse, t, entry.run_id).is_dir() for t in INGEST_TABLES)


def is_unchanged(entry, warehouse: str | Path, reports: str | Path) -> bool:
    """True when `entry` is the same file set as at its last ingest and every per-run output exists (a table
    added since the run was analysed makes it due again)."""
    if not ingest_is_current(entry, warehouse):
        return False
    outputs = [run_partition_dir(warehouse, t, entry.run_id) for t in tables.per_run_tables()]
    report = Path(reports) / "runs" / f"{entry.run_id}.html"
    return all(p.is_dir() for p in outputs) and report.is_file()


def split_changed(entries, warehouse: str | Path, reports: str | Path) -> tuple[list[str], list[str]]:
    """Finished entries split into (new or changed run_ids, unchanged run_ids), both sorted."""
    todo, unchanged = [], []
    for entry in entries:
        (unchanged if is_unchanged(entry, warehouse, reports) else todo).append(entry.run_id)
    return sorted(todo), sorted(unchanged)
