"""Helpers for the ingest tests: write an entry, ingest it, read back its tables."""

from __future__ import annotations

import math
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb

from pipeline.ingest import IngestLimits, discover_runs, ingest_run


def read_table(warehouse: Path, table: str, run_id: str) -> list[dict]:
    """Rows of one run's partition, as dicts."""
    con = duckdb.connect()
    rel = con.sql("select * from read_parquet($files)",
                  params={"files": str(Path(warehouse) / table / f"run_id={run_id}" / "*.parquet")})
    cols = rel.columns
    return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]


def ingest_root(
    root: Path, warehouse: Path, limits: IngestLimits | None = None
) -> dict[str, SimpleNamespace]:
    """Discover and ingest every run under root; per run_id its result and tables."""
    found = discover_runs(root, quiet_period_s=0, now=time.time() + 1)
    out = {}
    for entry in found.entries:
        result = ingest_run(entry, warehouse, limits)
        out[entry.run_id] = SimpleNamespace(
            entry=entry,
            result=result,
            run=read_table(warehouse, "runs", entry.run_id)[0],
            lines=read_table(warehouse, "log_lines", entry.run_id),
            metrics=read_table(warehouse, "step_metrics", entry.run_id),
        )
    return out


def ingest_text(tmp_path: Path, data: bytes | str, name: str = "run-a.log", limits=None) -> SimpleNamespace:
    """Ingest one single-file run holding `data`."""
    root = tmp_path / "archive"
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data.encode() if isinstance(data, str) else data)
    runs = ingest_root(root, tmp_path / "wh", limits)
    assert len(runs) == 1
    return next(iter(runs.values()))


def values(run: SimpleNamespace) -> dict[tuple[int, str], float]:
    """(step, key) -> value of a run's step_metrics."""
    return {(m["step"], m["key"]): m["value"] for m in run.metrics}


def same(a: float, b: float) -> bool:
    """Equal, NaN equal to NaN."""
    return (math.isnan(a) and math.isnan(b)) or a == b
