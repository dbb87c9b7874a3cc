"""The `error_templates` fleet table: every run's error and warning lines mined into templates, and the
templates no rule names that first appeared in a week (the fleet report's "New signatures").

`sql/error_lines.sql` picks the lines, Drain3 (pipeline/templates_miner.py) mines their distinct
messages, `sql/error_templates.sql` counts each template's runs and lines. A template becomes known
when a pattern of `sql/run_events.sql` names its lines.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipeline import lake
from pipeline.templates_miner import mine_templates

NAME = "error_templates"
# what sql/error_lines.sql and sql/error_templates.sql read, with the columns of an empty stand-in
READS = {
    "run_events": "run_id varchar, file varchar, line_no bigint, kind varchar, event_class varchar,"
                  " message varchar, ts timestamp, order_ts timestamp",
    "runs": "run_id varchar, last_ts timestamp, mtime timestamp, ingested_at timestamp",
    "run_summary": "run_id varchar, root_cause_file varchar, root_cause_line_no bigint",
}
MEMORY_LIMIT = "512MB"
NEW_DAYS = 7
MAX_NEW_SHOWN = 50


def _sql(name: str) -> str:
    from pipeline.derive import sql_text

    return sql_text(name)


def error_templates_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The `error_templates` rows, from a connection with views of run_events, runs and run_summary."""
    con.execute(f"create or replace temp table error_lines as {_sql('error_lines')}")
    # oldest first: Drain3 widens a template as lines join it, so the order only decides which line
    # founds a template, never which template a line ends in
    messages = [m for (m,) in con.execute(
        "select message from error_lines group by message order by min(seen_at) nulls last, message"
    ).fetchall()]
    con.register("line_templates", pa.table({"message": pa.array(messages, pa.string()),
                                             "template": pa.array(mine_templates(messages), pa.string())}))
    try:
        return con.sql(_sql(NAME)).to_arrow_table()
    finally:
        con.unregister("line_templates")
        con.execute("drop table error_lines")


def derive_error_templates(warehouse: str | Path) -> int:
    """Rewrite the `error_templates` fleet table from every run's events; returns its row count."""
    con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT,
                                 "temp_directory": str(Path(warehouse) / ".duckdb-tmp")})
    try:
        con.execute("set enable_progress_bar = false")
        for table, stand_in in READS.items():
            src = lake.table_source(warehouse, table)
            con.execute(f"create temp view {table} as select * from {src}" if src
                        else f"create temp table {table} ({stand_in})")
        data = error_templates_table(con)
    finally:
        con.close()
    lake.write_fleet_table(warehouse, NAME, data)
    return data.num_rows


def new_signatures(warehouse: str | Path, day: date, days: int = NEW_DAYS) -> list[dict[str, Any]]:
    """Templates no rule names whose first line falls in the `days` days up to `day`, most runs first."""
    if lake.table_source(warehouse, NAME) is None:
        return []
    start = datetime.combine(day - timedelta(days=days - 1), datetime.min.time())
    end = datetime.combine(day + timedelta(days=1), datetime.min.time())
    con = duckdb.connect()
    try:
        cur = con.execute(
            f"select template, n_runs, n_lines, first_seen, last_seen, example, example_run_id, example_file,"
            f" example_line_no, kind, run_ids, root_cause_of from {lake.table_source(warehouse, NAME)}"
            " where not known and first_seen >= $start and first_seen < $end"
            " order by n_runs desc, n_lines desc, template limit $limit",
            {"start": start, "end": end, "limit": MAX_NEW_SHOWN},
        )
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def unknown_templates_of_run(warehouse: str | Path, run_id: str) -> list[dict[str, Any]]:
    """The templates no rule names among a run's error and warning lines (its root cause's first), for
    the run report: a run whose only error is such a line points at the template and the fleet's count."""
    if lake.table_source(warehouse, NAME) is None:
        return []
    con = duckdb.connect()
    try:
        cur = con.execute(
            f"select template, n_runs, n_lines, first_seen, last_seen, example,"
            f" list_contains(root_cause_of, $run) as root_cause from {lake.table_source(warehouse, NAME)}"
            " where not known and list_contains(run_ids, $run)"
            " order by root_cause desc, n_runs desc, template",
            {"run": run_id},
        )
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()
