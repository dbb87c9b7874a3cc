"""One value per (step, key) when a run's metric rows can repeat one (a resume repeating steps, a JSONL
file, seed timings, TensorBoard): DuckDB picks it from the rows written while reading."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.lake import write_run_table

from .schemas import STEP_METRICS_SCHEMA

SOURCE_RANK = "case source when 'console' then 0 when 'seed_kv' then 1 when 'seed_timing' then 1 else 2 end"
# One value per (step, key): the later segment wins, then console over the seed formats over JSONL,
# then the later line. JSONL rows carry segment -1: the file logger is truncated at every start-up,
# so what it holds belongs to the last segment.
RECONCILE_SQL = f"""
with raw as (select * from read_parquet($path)),
last_segment as (select coalesce(max(segment), 0) as s from raw),
fixed as (
    select * replace (case when segment < 0 then (select s from last_segment) else segment end as segment)
    from raw
)
select step, key, value, source, segment::integer as segment, file, line_no
from fixed
qualify row_number() over (
    partition by step, key order by segment desc, {SOURCE_RANK} asc, file desc, line_no desc
) = 1
order by step, key
"""


def write_reconciled(warehouse: Path, run_id: str, raw_path: Path, extra: pa.Table) -> tuple[Path, int]:
    """Write the run's `step_metrics` partition: the reconciled rows of `raw_path`, then `extra` (rows that
    are one per (step, key) already); returns (path, rows written). DuckDB spills next to `raw_path`'s folder."""
    con = duckdb.connect(config={
        "memory_limit": "256MB", "threads": 2, "preserve_insertion_order": True,
        "temp_directory": str(raw_path.parent.parent),
    })
    con.execute("set enable_progress_bar=false")
    counted = [0]

    def batches() -> Iterator[pa.RecordBatch]:
        source = con.sql(RECONCILE_SQL, params={"path": str(raw_path)}).to_arrow_reader(65536)
        for batch in itertools.chain(source, extra.to_batches()):
            counted[0] += batch.num_rows
            yield batch

    try:
        path = write_run_table(warehouse, "step_metrics", run_id, batches(), STEP_METRICS_SCHEMA)
    finally:
        con.close()
    return path, counted[0]
