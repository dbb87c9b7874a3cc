"""A run's evidence from its log: the causal (or last) line, the lines around it, the last error events."""

from __future__ import annotations

from typing import Any

import duckdb

from pipeline.error_templates import FURNITURE
from pipeline.ingest.roles import role_of
from pipeline.report.warehouse import columns, rows

CONTEXT_LINES = 6
FOLDED_STEP_LINE = 160
MAX_ERROR_EVENTS = 12
# traceback frames and their source lines are in the excerpt: the event table lists events, not frames
FRAME_EVENTS = ("traceback_frame", "traceback_code", "chained_exception")


def causal_line(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The line that explains the end (its root cause), else the last line of a run that did not complete."""
    if summary.get("root_cause_text") or summary.get("root_cause_line_no") is not None:
        return {"file": summary.get("root_cause_file"), "line_no": summary.get("root_cause_line_no"),
                "text": summary.get("root_cause_text") or "", "kind": "cause",
                "role": file_role(summary, summary.get("root_cause_file"))}
    if (summary.get("failure_class") != "completed" and summary.get("last_line_no") is not None
            and summary.get("last_line_file")):
        return {"file": summary.get("last_line_file"), "line_no": summary.get("last_line_no"),
                "text": summary.get("last_line_text") or "", "kind": "last_line",
                "role": file_role(summary, summary.get("last_line_file"))}
    return None


def context_lines(con: duckdb.DuckDBPyConnection, run_id: str, line: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The lines around `line` in its file; a step line (hundreds of metrics) folded to its head."""
    if not line or not line["file"] or line["line_no"] is None or not columns(con, "log_lines"):
        return []
    return rows(
        con,
        "select line_no, kind, line_no = $line_no as is_cause, "
        "case when kind = 'step_metrics' and length(text) > $fold "
        "then left(text, $fold) || format(' … ({} metrics)', length(text) - length(replace(text, ' - ', '')) // 3) "
        "else text end as text from log_lines "
        "where run_id = $run_id and file = $file and line_no between $lo and $hi order by line_no",
        {"run_id": run_id, "file": line["file"], "line_no": int(line["line_no"]),
         "lo": int(line["line_no"]) - CONTEXT_LINES, "hi": int(line["line_no"]) + CONTEXT_LINES,
         "fold": FOLDED_STEP_LINE},
    )


def error_events(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """The last error and warning events (those next to the end), in log order."""
    if not columns(con, "run_events"):
        return []
    return rows(
        con,
        "select * from (select * exclude (run_id) from run_events where run_id = $run_id "
        "and not list_contains($frames, event_class) "
        "order by coalesce(segment, 0) desc, file desc, line_no desc limit $n) "
        "order by coalesce(segment, 0), file, line_no",
        {"run_id": run_id, "n": MAX_ERROR_EVENTS, "frames": list(FRAME_EVENTS)},
    )


def error_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    """How many of the run's error lines a rule names and how many none does (traceback furniture aside;
    every named event counts where run_events has no `kind`, as in hand-made tables)."""
    have = columns(con, "run_events")
    if not have:
        return {"named": 0, "unnamed": 0}
    errors = "kind = 'error'" if "kind" in have else "event_class <> 'warning_other'"
    return rows(con, "select count(*) filter (event_class <> 'error_other') as named, "
                     "count(*) filter (event_class = 'error_other') as unnamed "
                     f"from run_events where run_id = $run_id and {errors} "
                     "and not list_contains($furniture, event_class)",
                {"run_id": run_id, "furniture": list(FURNITURE)})[0]


def file_role(summary: dict[str, Any], file: str | None) -> str | None:
    """The role of one of the run's files (runs.file_roles, else told by its name)."""
    if not file:
        return None
    recorded = {r["file"]: r["role"] for r in summary.get("file_roles") or []}
    return recorded.get(file) or role_of(file)


def lines_by_kind(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """How many lines of each kind the run's log has, most first."""
    if not columns(con, "log_lines"):
        return []
    return rows(con, "select coalesce(kind, 'other') as kind, count(*) as n from log_lines "
                     "where run_id = $run_id group by all order by n desc", {"run_id": run_id})


def lines_by_file(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """Lines, errors and unclassified lines per file of the run (the 50 largest files)."""
    if not columns(con, "log_lines"):
        return []
    return rows(con, "select file, count(*) as n, count(*) filter (kind = 'error') as errors, "
                     "count(*) filter (kind = 'other') as other from log_lines "
                     "where run_id = $run_id group by all order by n desc limit 50", {"run_id": run_id})
