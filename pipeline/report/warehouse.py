"""Reading the warehouse for run reports: a batch's views, rows grouped by run, per-step arrays, every value a
bound parameter.

A batch of reports reads each table in one statement for all its runs (`list_contains($ids, run_id)`), split
per run here, instead of a dozen small queries per report: a query costs DuckDB about a millisecond to plan
and run however few its rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake


def connect(warehouse: str | Path, run_ids: list[str]) -> duckdb.DuckDBPyConnection:
    """A connection with a view per warehouse table, per-run ones holding only `run_ids` (fleet tables whole),
    on this process's kept in-memory DuckDB database (`lake.open_database`)."""
    con = lake.open_database()
    add_views(con, warehouse, run_ids)
    return con


def add_views(con: duckdb.DuckDBPyConnection, warehouse: str | Path, run_ids: list[str],
              only: Iterable[str] | None = None) -> None:
    """Point the view of every warehouse table (of those in `only`, when given) on `con` at the partitions of
    `run_ids` (fleet tables whole)."""
    for table, src in lake.present_tables(warehouse, run_ids, only=only).items():
        con.execute(f"create or replace temp view {table} as select * from {src}")


# DuckDB's type names of the columns `series` reads as numbers
NUMERIC_TYPES = frozenset({"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                           "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE"})


def columns(con: duckdb.DuckDBPyConnection, table: str, types: frozenset[str] | None = None) -> list[str]:
    """Columns of a warehouse view (only those of DuckDB `types` when given), or [] if the table is not in the
    warehouse."""
    found = con.execute(
        "select column_name, data_type from duckdb_columns() where table_name = $table "
        "and database_name in (current_database(), 'temp') order by column_index",
        {"table": table},
    ).fetchall()
    return [name for name, kind in found if types is None or kind in types]


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
    """Run a query and return its rows as dicts."""
    cur = con.execute(sql, params or {})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def by_run(found: list[dict[str, Any]], key: str = "run_id", drop: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by their `key` column (dropped from them unless `drop` is false), each group in row order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        out.setdefault(r.pop(key) if drop else r[key], []).append(r)
    return out


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


def firsts(con: duckdb.DuckDBPyConnection, table: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each run's (first) row of a one-row-per-run table; a run without one is left out."""
    out: dict[str, dict[str, Any]] = {}
    for r in table_rows(con, table, "list_contains($ids, run_id)", {"ids": run_ids}):
        out.setdefault(r["run_id"], r)
    return out


def series(con: duckdb.DuckDBPyConnection, table: str, run_ids: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Each run's numeric columns of a per-step table as float arrays (NULL -> NaN), ordered by step; a run
    without rows is left out."""
    numeric = [name for name in columns(con, table, NUMERIC_TYPES) if name != "run_id"]
    if not numeric:
        return {}
    picks = ", ".join(f'"{name}"' for name in numeric)
    raw = con.execute(f"select run_id, {picks} from {table} where list_contains($ids, run_id) "
                      "order by run_id, step", {"ids": run_ids}).fetchnumpy()
    ids = np.asarray(raw.pop("run_id"), dtype=object)
    values = {}
    for name, arr in raw.items():
        v = np.asarray(np.ma.getdata(arr), dtype=float)
        if np.ma.isMaskedArray(arr):
            v[np.ma.getmaskarray(arr)] = np.nan
        values[name] = v
    bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
    return {ids[a]: {name: v[a:b] for name, v in values.items()} for a, b in zip(bounds[:-1], bounds[1:],
                                                                                    strict=True) if b > a}
