"""DuckDB reference points for the ingest benchmark, each run alone in its own process.

- `read`: DuckDB's raw read of the lines (`read_csv`, one VARCHAR column, no quoting): the speed of
  the bytes;
- `copy`: the same lines streamed, alone, into zstd Parquet: the floor of keeping every line;
- `classify`: DuckDB doing part of our ingest in SQL: each line's kind (our own regexes, in our order),
  its Ray prefix, phase and timestamp, written with the lines into zstd Parquet. It numbers no lines,
  parses no step metrics, and tracks no resume segments nor config.

Usage: python benchmarks/duckdb_reference.py read|copy|classify OUT.parquet FILE...
Prints the number of lines read (`read`) or written.
"""

from __future__ import annotations

import sys

import duckdb

from pipeline.ingest import lines as L

READ_OPTIONS = (
    "columns={'line': 'VARCHAR'}, header=false, delim='\\x01', quote='', escape='', auto_detect=false, "
    "strict_mode=false"
)
LINES = f"read_csv($files, {READ_OPTIONS})"
CLASSIFY_SQL = f"""
select filename as file, line,
    case when regexp_matches(line, getvariable('re_step')) then 'step_metrics'
         when regexp_matches(line, getvariable('re_memory')) then 'memory'
         when regexp_matches(line, getvariable('re_config')) then 'config'
         when regexp_matches(line, getvariable('re_error')) then 'error'
         when regexp_matches(line, getvariable('re_warning')) then 'warning'
         when regexp_matches(line, getvariable('re_weak')) then 'error'
         when regexp_matches(line, getvariable('re_progress')) then 'progress'
         else 'other' end as kind,
    nullif(regexp_extract(line, getvariable('re_prefix'), 1), '') as component,
    try_cast(nullif(regexp_extract(line, getvariable('re_prefix'), 2), '') as bigint) as pid,
    nullif(regexp_extract(line, getvariable('re_phase'), 1), '') as phase_hint,
    nullif(regexp_extract(line, getvariable('re_ts'), 1), '') as ts
from read_csv($files, {READ_OPTIONS}, filename=true)
"""
# variables, not parameters, hold the patterns: DuckDB compiles a constant pattern once per query
PATTERNS = [
    ("set variable re_step = $p", L.STEP_ANY_RE),
    ("set variable re_memory = $p", L.MEMORY_RE),
    ("set variable re_config = $p", L.CONFIG_RE),
    ("set variable re_error = $p", L.ERROR_STRONG_RE),
    ("set variable re_warning = $p", L.WARNING_RE),
    ("set variable re_weak = $p", L.ERROR_WEAK_RE),
    ("set variable re_progress = $p", L.PROGRESS_RE),
    ("set variable re_prefix = $p", L.PREFIX_RE),
    ("set variable re_phase = $p", L.PHASE_RE),
    ("set variable re_ts = $p", L.TS_RE),
]


def copy_to(con: duckdb.DuckDBPyConnection, query: str, out: str, files: list[str]) -> int:
    """Stream `query` into zstd Parquet at `out`; the number of rows written."""
    # COPY takes no bound parameter for its target: the path is quoted instead
    target = "'" + out.replace("'", "''") + "'"
    con.execute(f"copy ({query}) to {target} (format parquet, compression zstd)", {"files": files})
    return con.execute("select count(*) from read_parquet($out)", {"out": out}).fetchone()[0]


def main(mode: str, out: str, files: list[str]) -> int:
    """Run one reference point; the number of lines."""
    con = duckdb.connect()
    con.execute("set enable_progress_bar = false")
    if mode == "read":
        return con.execute(f"select count(*) from {LINES}", {"files": files}).fetchone()[0]
    if mode == "copy":
        return copy_to(con, f"select line from {LINES}", out, files)
    for statement, pattern in PATTERNS:
        con.execute(statement, {"p": pattern})
    return copy_to(con, CLASSIFY_SQL, out, files)


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
