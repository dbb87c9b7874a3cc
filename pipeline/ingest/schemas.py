"""The Arrow schemas of the tables ingest writes: `log_lines`, `step_metrics` and `runs`."""

from __future__ import annotations

import pyarrow as pa

from .config import INT_FIELDS, STRING_FIELDS
from .wandb_run import RUN_FIELDS as WANDB_RUN_FIELDS

LOG_LINES_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("line_no", pa.int64()),
        ("text", pa.string()),
        ("kind", pa.string()),
        ("component", pa.string()),
        ("pid", pa.int64()),
        ("segment", pa.int32()),
        ("step", pa.int64()),
        ("phase_hint", pa.string()),
        ("ts", pa.timestamp("us")),
    ]
)
STEP_METRICS_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("key", pa.string()),
        ("value", pa.float64()),
        ("source", pa.string()),
        ("segment", pa.int32()),
        ("file", pa.string()),
        ("line_no", pa.int64()),
    ]
)
RUNS_SCHEMA = pa.schema(
    [
        ("source_path", pa.string()),
        ("archive_form", pa.string()),
        ("n_files", pa.int64()),
        ("n_lines", pa.int64()),
        ("n_bytes", pa.int64()),
        ("n_lines_read", pa.int64()),
        ("n_undecodable_lines", pa.int64()),
        ("n_step_lines", pa.int64()),
        ("n_steps", pa.int64()),
        ("n_metric_values", pa.int64()),
        ("n_parse_failures", pa.int64()),
        ("n_segments", pa.int32()),
        ("problems", pa.list_(pa.string())),
        ("first_ts", pa.timestamp("us")),
        ("last_ts", pa.timestamp("us")),
        ("mtime", pa.timestamp("us")),
        ("ingested_at", pa.timestamp("us")),
    ]
    + [(k, pa.string()) for k in STRING_FIELDS]
    + [(k, pa.int64()) for k in INT_FIELDS]
    + [("gpu_memory_utilization", pa.float64()), ("actor_lr", pa.float64())]
    + [("config_json", pa.string()), ("verl_format", pa.string()), ("ingest_version", pa.int32())]
    + list(WANDB_RUN_FIELDS)
    + [("file_roles", pa.list_(pa.struct([("file", pa.string()), ("role", pa.string())])))]
)
