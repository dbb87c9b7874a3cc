"""Reading the warehouse for a report: columns, rows and per-step arrays, every value a bound parameter."""

from __future__ import annotations

import itertools
import math
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake

_DATABASES: dict[int, duckdb.DuckDBPyConnection] = {}
# Read from the run's own partition even in a preloaded batch: a batch's every log line is too much to hold,
# and a report reads a few of them.
READ_IN_PLACE = ("log_lines",)
# The rows of a table a run report reads, where it reads only some (a preloaded batch holds only those).
REPORT_ROWS = {"step_metrics": "key like 'val-core/%'"}
_BATCH_NAMES = itertools.count()


@dataclass(frozen=True)
class _Batch:
    warehouse: Path
    database: str  # the attached in-memory database that holds the batch's rows
    run_ids: frozenset[str]  # the runs whose rows it holds: the batch's and their earlier peers'
    columns: dict[str, list[str]] = field(default_factory=dict)  # of its tables, as reports ask for them


_BATCHES: dict[int, _Batch] = {}
# The connections on a preloaded batch, with the columns of the batch's tables (a duckdb_columns() scan costs
# ~1.4 ms, and a report asks about twenty times); a connection leaves when its views change.
_BATCH_COLUMNS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, dict[str, list[str]]] = (
    weakref.WeakKeyDictionary())


def connect(warehouse: str | Path, run_ids: list[str]) -> duckdb.DuckDBPyConnection:
    """A connection with a view per warehouse table, per-run ones holding only `run_ids` (fleet tables whole),
    on this process's one in-memory DuckDB database: opening a database starts its threads (about 20 ms of
    CPU, and more wall time on a busy machine), a connection to an open one costs under a millisecond.

    Inside `preloaded(...)` for these runs, the tables are the batch's copies in memory (log_lines aside)."""
    con = _database().cursor()
    batch = _batch_holding(warehouse, run_ids)
    if batch is None:
        add_views(con, warehouse, run_ids)
    else:
        con.execute(f"use {batch.database}")
        _add_views(con, warehouse, run_ids, READ_IN_PLACE)
        _BATCH_COLUMNS[con] = batch.columns
    return con


def add_views(con: duckdb.DuckDBPyConnection, warehouse: str | Path, run_ids: list[str]) -> None:
    """Point the view of every warehouse table on `con` at the partitions of `run_ids` (fleet tables whole);
    nothing to do inside `preloaded(...)` when the batch holds these runs."""
    if _batch_holding(warehouse, run_ids) is None:
        _add_views(con, warehouse, run_ids)


def _add_views(con: duckdb.DuckDBPyConnection, warehouse: str | Path, run_ids: list[str],
               only: tuple[str, ...] | None = None) -> None:
    _BATCH_COLUMNS.pop(con, None)
    for table, src in lake.present_tables(warehouse, run_ids, only=only).items():
        con.execute(f"create or replace temp view {table} as select * from {src}")


def _batch_holding(warehouse: str | Path, run_ids: list[str]) -> _Batch | None:
    batch = _BATCHES.get(os.getpid())
    if batch is None or batch.warehouse != Path(warehouse) or not batch.run_ids.issuperset(run_ids):
        return None
    return batch


@contextmanager
def preloaded(warehouse: str | Path, run_ids: list[str],
              peers_of: Callable[[duckdb.DuckDBPyConnection, str], list[str]]) -> Iterator[None]:
    """Within it, `connect` for any of `run_ids` reads their tables from one copy in memory, read from the
    warehouse in one statement per table, instead of binding every table's Parquet files per report.

    The copy holds the fleet tables, then the per-run tables' rows of `run_ids` and of the runs that
    `peers_of(con, run_id)` names (a report compares its run with them), log_lines aside (READ_IN_PLACE) and
    only REPORT_ROWS of the tables listed there.
    """
    run_ids = [lake.check_run_id(r) for r in run_ids]
    name = f"report_batch_{os.getpid()}_{next(_BATCH_NAMES)}"
    con = _database().cursor()
    con.execute(f"attach ':memory:' as {name}")
    try:
        con.execute(f"use {name}")
        present = lake.present_tables(warehouse, run_ids)
        per_run = set(lake.per_run_tables())
        for table in present.keys() - per_run:
            con.execute(f"create table {table} as select * from {present[table]}")
        held = list(dict.fromkeys([*run_ids, *(p for rid in run_ids for p in peers_of(con, rid))]))
        for table in (per_run & present.keys()) - set(READ_IN_PLACE):
            src = lake.table_source(warehouse, table, held)
            con.execute(f"create table {table} as select * from {src} where {REPORT_ROWS.get(table, 'true')}")
        _BATCHES[os.getpid()] = _Batch(Path(warehouse), name, frozenset(held))
        yield
    finally:
        _BATCHES.pop(os.getpid(), None)
        con.execute("use memory")
        con.execute(f"detach {name}")
        con.close()


def _database() -> duckdb.DuckDBPyConnection:
    # one per process: a child forked from a process that opened one must not touch the parent's threads
    pid = os.getpid()
    if pid not in _DATABASES:
        _DATABASES[pid] = duckdb.connect()
    return _DATABASES[pid]


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """Columns of a warehouse view, or [] if the table is not in the warehouse."""
    cache = None if table in READ_IN_PLACE else _BATCH_COLUMNS.get(con)
    if cache is not None and table in cache:
        return cache[table]
    found = con.execute(
        "select column_name from duckdb_columns() where table_name = $table "
        "and database_name in (current_database(), 'temp') order by column_index",
        {"table": table},
    ).fetchall()
    names = [name for (name,) in found]
    if cache is not None:
        cache[table] = names
    return names


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    """Run a query and return its rows as dicts."""
    cur = con.execute(sql, params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def clean(value: Any) -> Any:
    """None for NaN or infinity, else the value."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def clean_rows(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with NaN and infinities as None."""
    return [{k: clean(v) for k, v in r.items()} for r in found]


def table_rows(con: duckdb.DuckDBPyConnection, table: str, where: str = "true", params: dict | None = None,
               order: str = "") -> list[dict[str, Any]]:
    """The rows of `table` matching `where` (bound `params`), or [] when the table is not in the warehouse."""
    if not columns(con, table):
        return []
    tail = f" order by {order}" if order else ""
    return clean_rows(rows(con, f"select * from {table} where {where}{tail}", params))


def one(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> dict[str, Any]:
    """A run's row of a one-row-per-run table, or {}."""
    found = table_rows(con, table, "run_id = $run_id", {"run_id": run_id})
    return found[0] if found else {}


def series(con: duckdb.DuckDBPyConnection, table: str, run_id: str) -> dict[str, np.ndarray]:
    """One run's per-step table as float arrays (NULL -> NaN), ordered by step; strings kept as objects."""
    if not columns(con, table):
        return {}
    raw = con.execute(
        f"select * exclude (run_id) from {table} where run_id = $run_id order by step", {"run_id": run_id}
    ).fetchnumpy()
    out = {}
    for name, arr in raw.items():
        if arr.dtype.kind in "iufb":
            values = np.asarray(np.ma.getdata(arr), dtype=float)
            if np.ma.isMaskedArray(arr):
                values[np.ma.getmaskarray(arr)] = np.nan
            out[name] = values
        else:
            out[name] = np.asarray(arr, dtype=object)
    return out
