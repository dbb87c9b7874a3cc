"""The healthy real verl logs of the shared folder (LABELS.jsonl `healthy_metrics: true`), as detector input.

Each log is ingested and derived into a temporary warehouse exactly as `verl-health analyze` does,
so the detector sees what it sees in production: step_phases, step_health and every logged key.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from pipeline.detect.warehouse import read_metrics, read_table

DEFAULT_DIR = Path(__file__).resolve().parents[3] / "shared" / "real-logs"


@dataclass
class RealLogs:
    """step_phases, step_health and step_metrics rows of the healthy real logs that log steps."""

    phases: pd.DataFrame
    health: pd.DataFrame
    metrics: pd.DataFrame
    files: list[str]


def healthy_files(folder: str | Path) -> list[Path]:
    """The logs LABELS.jsonl calls healthy (`healthy_metrics` true), in name order."""
    folder = Path(folder)
    labels = [json.loads(line) for line in (folder / "LABELS.jsonl").read_text().splitlines() if line.strip()]
    return sorted(folder / lab["file"] for lab in labels if lab["healthy_metrics"] is True)


def load_healthy(folder: str | Path = DEFAULT_DIR) -> RealLogs | None:
    """Ingest and derive the healthy real logs of `folder`; None when the folder or its labels are missing."""
    from pipeline.derive import derive_run_tables
    from pipeline.ingest import discover_runs, ingest_run

    folder = Path(folder)
    if not (folder / "LABELS.jsonl").is_file():
        return None
    files = healthy_files(folder)
    with tempfile.TemporaryDirectory() as tmp:
        archive, warehouse = Path(tmp) / "archive", Path(tmp) / "warehouse"
        archive.mkdir()
        for f in files:
            shutil.copy2(f, archive / f.name)
        ids = []
        for entry in discover_runs(archive, quiet_period_s=0).entries:
            ingest_run(entry, warehouse)
            ids.append(entry.run_id)
        derive_run_tables(warehouse, ids)
        with duckdb.connect() as con:
            phases = read_table(con, warehouse, "step_phases", ids)
            health = read_table(con, warehouse, "step_health", ids)
            metrics = read_metrics(con, warehouse, ids)
    return RealLogs(phases, health, metrics if metrics is not None else pd.DataFrame(), [f.name for f in files])
