"""Reading the warehouse for a report: columns, rows and per-step arrays, every value a bound parameter."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake

_DATABASES: dict[int, duckdb.DuckDBPyConnection] = {}


def connect(warehouse: str | Path, run_ids: list[str]) -> duckdb.DuckDBPyConnection:
    """A connection with a view per warehouse table, per-run ones holding only `run_ids` (fleet tables whole),
    on this process's one in-memory DuckDB database: opening a database starts its threads (about 20 ms of
    CPU, and more wall time on a busy machine), a connection to an open one costs under a millisecond."""
    con = _database().cursor()
    add_views(con, warehouse, run_ids)
    return con


def add_views(con: duckdb.DuckDBPyConnection, warehouse: str | Path, run_ids: list[str]) -> None:
    """Point the view of every warehouse table on `con` at the partitions of `run_ids` (fleet tables whole)."""
    for table, src in lake.present_tables(warehouse, run_ids).items():
        con.execute(f"create or replace temp view {table} as select * from {src}")


def _database() -> duckdb.DuckDBPyConnection:
    # one per process: a child forked from a process that opened one must not touch the parent's threads
    pid = os.getpid()
    if pid not in _DATABASES:
        _DATABASES[pid] = duckdb.connect()
    return _DATABASES[pid]


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """Columns of a warehouse view, or [] if the table is not in the warehouse."""
    found = con.execute(
        "select column_name from duckdb_columns() where table_name = $table order by column_index",
        {"table": table},
    ).fetchall()
    return [name for (name,) in found]


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
            out[name] = np.ma.filled(np.ma.asarray(arr).astype(float), np.nan)
        else:
            out[name] = np.asarray(arr, dtype=object)
    return out
