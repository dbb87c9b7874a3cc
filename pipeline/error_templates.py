"""The `error_templates` fleet table: every run's error and warning lines mined into templates, and the
templates no rule names that first appeared in a week (the fleet report's "New signatures").

Drain3 (pipeline/templates_miner.py) mines the distinct messages of `run_events`; `sql/error_templates.sql`
counts each template's runs and lines. A template becomes known when a pattern of `sql/run_events.sql`
names its lines.
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
# run_events classes every traceback shares: not signatures of anything, so never mined
FURNITURE = ("traceback", "traceback_frame", "traceback_code", "chained_exception")
NEW_DAYS = 7
MAX_NEW_SHOWN = 50


def register_line_templates(con: duckdb.DuckDBPyConnection) -> int:
    """Mine the distinct messages of `run_events` (furniture aside) with Drain3 and register the mapping as
    `line_templates(message, template)` on `con`, for sql/error_templates.sql; returns the messages mined.

    A warehouse without run_events mines nothing: derive stands in an empty one (its registry `stand_in`).
    """
    # Messages equal but for their digits get one template (the miner masks every number), so Drain3 sees
    # one message per such shape: a fleet's messages mostly differ in numbers. Oldest first: Drain3 widens a
    # template as lines join it, so the order only decides which line founds a template.
    found = con.execute(
        "select message, regexp_replace(message, '[0-9]+', '0', 'g') as shape from run_events"
        " where not list_contains($furniture, event_class) and trim(message) <> ''"
        " group by message order by min(coalesce(ts, order_ts)) nulls last, message",
        {"furniture": list(FURNITURE)},
    ).fetchall()
    first_of_shape: dict[str, str] = {}
    for message, shape in found:
        first_of_shape.setdefault(shape, message)
    template_of = dict(zip(first_of_shape, mine_templates(first_of_shape.values()), strict=True))
    con.register("line_templates", pa.table({
        "message": pa.array([m for m, _ in found], pa.string()),
        "template": pa.array([template_of[shape] for _, shape in found], pa.string()),
    }))
    return len(first_of_shape)


def _query(warehouse: str | Path, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of `sql` over the error_templates table (`{table}` in it) as dicts; none without the table."""
    source = lake.table_source(warehouse, NAME)
    if source is None:
        return []
    with lake.reader(warehouse, only=()) as con:
        cur = con.execute(sql.format(table=source), params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def new_signatures(warehouse: str | Path, day: date, days: int = NEW_DAYS) -> list[dict[str, Any]]:
    """Templates no rule names whose first line falls in the `days` days up to `day`: errors before warnings,
    then most runs first."""
    start = datetime.combine(day - timedelta(days=days - 1), datetime.min.time())
    end = datetime.combine(day + timedelta(days=1), datetime.min.time())
    return _query(
        warehouse,
        "select template, n_runs, n_lines, first_seen, last_seen, example, example_run_id, example_file,"
        " example_line_no, kind, run_ids, root_cause_of from {table}"
        " where not known and first_seen >= $start and first_seen < $end"
        " order by kind = 'error' desc, n_runs desc, n_lines desc, template limit $limit",
        {"start": start, "end": end, "limit": MAX_NEW_SHOWN},
    )


def caught_errors_of_run(warehouse: str | Path, run_id: str, limit: int = 5) -> list[dict[str, Any]]:
    """A run's error lines by template (error_templates), most lines first: for a run no error ended, the
    errors it logged and went on from (not the template of its root-cause line: a Ctrl-C's KeyboardInterrupt
    stopped it)."""
    try:
        return _query(
            warehouse,
            "select template, r.n_lines, r.first_file, r.first_line_no from {table}, unnest(lines_by_run) as u(r)"
            " where kind = 'error' and r.run_id = $run and not list_contains(root_cause_of, $run)"
            " order by r.n_lines desc, r.first_line_no limit $limit",
            {"run": run_id, "limit": limit},
        )
    except duckdb.BinderException:  # a warehouse derived before error_templates had lines_by_run
        return []


def unknown_templates_of_run(warehouse: str | Path, run_id: str) -> list[dict[str, Any]]:
    """The templates no rule names among a run's error and warning lines (its root cause's first), for
    the run report: a run whose only error is such a line points at the template and the fleet's count."""
    return _query(
        warehouse,
        "select template, n_runs, n_lines, first_seen, last_seen, example, kind,"
        " list_contains(root_cause_of, $run) as root_cause from {table}"
        " where not known and list_contains(run_ids, $run)"
        " order by root_cause desc, n_runs desc, template",
        {"run": run_id},
    )
