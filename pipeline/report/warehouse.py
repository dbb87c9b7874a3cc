"""Reading the warehouse for a report: columns, rows and per-step arrays, every value a bound parameter."""

from __future__ import annotations

import math
from typing import Any

import duckdb
import numpy as np


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
