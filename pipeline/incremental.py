"""Incremental analysis: skip runs whose archive entry has not changed since they were last analysed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import tables
from pipeline.lake import parquet_readable, partition_readable, run_partition_dir
from pipeline.vocabulary import NOT_ANALYSED

INGEST_TABLES = tables.names(writer=tables.INGEST)  # what ingest writes per run
# A Dagster run tag: ingest every requested run again, even one whose archive entry has not changed.
REINGEST_TAG = "verl-health/reingest"
MTIME_TOLERANCE_S = 1e-3
# What `runs.ingest_version` records; a run ingested by an older version is ingested again.
INGEST_VERSION = 5  # 4: W&B run facts, file roles, TensorBoard scalars; 5: credentials masked in config_json
# The `runs` column that names one ingest of a run (its time, to the microsecond); run_summary carries it
INGEST_ID = "ingested_at"


def _first_row(warehouse: str | Path, table: str, run_id: str, columns: list[str]) -> dict | None:
    """The first row of a run's partition of `table` (those of `columns` it has), or None when it has none
    or it cannot be read."""
    folder = run_partition_dir(warehouse, table, run_id)
    part = next(iter(sorted(folder.glob("*.parquet"))), None) if folder.is_dir() else None
    if part is None or not parquet_readable(part):  # missing, or cut short: the run is redone
        return None
    try:
        parquet = pq.ParquetFile(part)
        rows = parquet.read(columns=[c for c in columns if c in parquet.schema_arrow.names]).to_pylist()
    except (OSError, pa.ArrowException):
        return None
    return rows[0] if rows else None


def recorded_source(warehouse: str | Path, run_id: str) -> tuple[str, float | None] | None:
    """The (source_path, mtime as epoch seconds) the `runs` table recorded at ingest, or None (also when
    an older ingest version wrote it, or when a step of its last analysis failed on it)."""
    row = _first_row(warehouse, "runs", run_id, ["source_path", "mtime", "ingest_version", "problems"])
    if not row or row.get("ingest_version") != INGEST_VERSION:
        return None
    if any(p.startswith(NOT_ANALYSED) for p in row.get("problems") or []):
        return None
    mtime = row["mtime"]
    # ingest writes datetime.fromtimestamp(entry.mtime): naive local time, so .timestamp() inverts it.
    return row["source_path"], mtime.timestamp() if mtime is not None else None


def ingest_is_current(entry, warehouse: str | Path) -> bool:
    """True when the lake holds `entry` as it is now: same path and mtime, every ingest table written."""
    recorded = recorded_source(warehouse, entry.run_id)
    if recorded is None or recorded[0] != str(entry.path) or recorded[1] is None:
        return False
    if abs(recorded[1] - entry.mtime) > MTIME_TOLERANCE_S:
        return False
    return all(partition_readable(run_partition_dir(warehouse, t, entry.run_id)) for t in INGEST_TABLES)


def is_unchanged(entry, warehouse: str | Path, reports: str | Path) -> bool:
    """True when `entry` is the same file set as at its last ingest and every per-run output exists and was built
    from that ingest (a table added since the run was analysed, or a damaged partition, makes it due again).

    `runs.ingested_at` names an ingest; run_summary carries it from the `runs` row it was derived from, and the
    run's report is rendered after every table of the run, so a report older than the ingest is from another.
    """
    from pipeline.report.render import run_report_path  # the report layer imports ingest, which imports this

    if not ingest_is_current(entry, warehouse):
        return False
    outputs = [run_partition_dir(warehouse, t, entry.run_id) for t in tables.per_run_tables()]
    report = run_report_path(reports, entry.run_id)
    if not (all(partition_readable(p) for p in outputs) and report.is_file()):
        return False
    ingested = (_first_row(warehouse, "runs", entry.run_id, [INGEST_ID]) or {}).get(INGEST_ID)
    derived = (_first_row(warehouse, "run_summary", entry.run_id, [INGEST_ID]) or {}).get(INGEST_ID)
    return ingested is not None and derived == ingested and report.stat().st_mtime >= ingested.timestamp()


def split_changed(entries, warehouse: str | Path, reports: str | Path) -> tuple[list[str], list[str]]:
    """Finished entries split into (new or changed run_ids, unchanged run_ids), both sorted."""
    todo, unchanged = [], []
    for entry in entries:
        (unchanged if is_unchanged(entry, warehouse, reports) else todo).append(entry.run_id)
    return sorted(todo), sorted(unchanged)
