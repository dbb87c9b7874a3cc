"""Ingest: archived verl runs -> the `runs`, `log_lines` and `step_metrics` tables of the lake."""

from .discover import Discovery, RunEntry, discover_runs, run_id_for
from .readers import IngestLimits
from .run import IngestResult, ingest_run

__all__ = [
    "Discovery",
    "IngestLimits",
    "IngestResult",
    "RunEntry",
    "discover_runs",
    "ingest_run",
    "run_id_for",
]
