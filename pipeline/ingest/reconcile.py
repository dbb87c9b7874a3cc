"""One value per (step, key) when a run's metric rows can repeat one (a resume repeating steps, a JSONL
file, seed timings, TensorBoard): Arrow picks it from the rows kept in memory, or, for a run whose rows
were spilled to a scratch file, DuckDB from that file, by the same rules."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.lake import open_database, write_run_table

from .schemas import STEP_METRICS_SCHEMA

# a source's rank when a (step, key) repeats (lower wins); any other source ranks `OTHER_RANK`
SOURCE_RANKS = {"console": 0, "seed_kv": 1, "seed_timing": 1}
OTHER_RANK = 2
RANKED_SOURCES = pa.array(list(SOURCE_RANKS), pa.string())
RANKS = pa.array(list(SOURCE_RANKS.values()), pa.int8())  # of RANKED_SOURCES
SOURCE_RANK = (
    "case source " + " ".join(f"when '{s}' then {r}" for s, r in SOURCE_RANKS.items()) + f" else {OTHER_RANK} end"
)
# One value per (step, key): the later segment wins, then console over the seed formats over JSONL,
# then the later line, then the later value of a line giving the key twice. JSONL rows carry segment -1:
# the file logger is truncated at every start-up, so what it holds belongs to the last segment.
RECONCILE_SQL = f"""
with raw as (select * from read_parquet($path, file_row_number = true)),
last_segment as (select coalesce(max(segment), 0) as s from raw),
fixed as (
    select * replace (case when segment < 0 then (select s from last_segment) else segment end as segment)
    from raw
)
select step, key, value, source, segment::integer as segment, file, line_no
from fixed
qualify row_number() over (
    partition by step, key order by segment desc, {SOURCE_RANK} asc, file desc, line_no desc, file_row_number desc
) = 1
order by step, key
"""


def write_reconciled(warehouse: Path, run_id: str, raw_path: Path, extra: pa.Table) -> tuple[Path, int]:
    """Write the run's `step_metrics` partition: the reconciled rows of `raw_path`, then `extra` (rows that
    are one per (step, key) already); returns (path, rows written). DuckDB spills next to `raw_path`'s folder."""
    con = open_database(config={
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


def reconciled(raw: pa.Table) -> pa.Table:
    """The rows of `raw` (in `step_metrics` form) that `RECONCILE_SQL` keeps, in its order, computed in memory.

    Rows equal in every sort column (one line giving a key twice) keep the later one.
    """
    if raw.num_rows == 0:
        return raw
    segment = raw.column("segment").to_numpy()
    segment = pa.array(np.where(segment < 0, segment.max(), segment).astype(np.int32))
    rank = pc.fill_null(RANKS.take(pc.index_in(raw.column("source"), RANKED_SOURCES)), OTHER_RANK)
    keys = pa.table({
        "step": raw.column("step"), "key": raw.column("key"), "segment": segment, "rank": rank,
        "file": raw.column("file"), "line_no": raw.column("line_no"), "order": np.arange(raw.num_rows),
    })
    order = pc.sort_indices(keys, sort_keys=[
        ("step", "ascending"), ("key", "ascending"), ("segment", "descending"), ("rank", "ascending"),
        ("file", "descending"), ("line_no", "descending"), ("order", "descending"),
    ])
    step = keys.column("step").take(order).to_numpy()
    key = keys.column("key").take(order).combine_chunks()
    first = np.ones(len(step), dtype=bool)
    first[1:] = step[1:] != step[:-1]
    same_key = pc.equal(key.slice(1), key.slice(0, len(key) - 1))
    first[1:] |= ~pc.fill_null(same_key, False).to_numpy(zero_copy_only=False)
    kept = order.take(pa.array(np.flatnonzero(first)))
    return raw.set_column(raw.schema.get_field_index("segment"), "segment", segment).take(kept)
