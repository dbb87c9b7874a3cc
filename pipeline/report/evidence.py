"""A run's evidence from its log: the causal (or last) line, the lines around it, the last error events."""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb

from pipeline.credentials import mask_secrets
from pipeline.error_templates import FURNITURE
from pipeline.ingest.roles import role_of
from pipeline.report.warehouse import by_run, columns, rows
from pipeline.tables import in_last_launch

CONTEXT_LINES = 6
FOLDED_STEP_LINE = 160
SHOWN_LINE_CHARS = 4000  # a longer line (up to ingest's 64 MiB) is shown cut, with its length
MAX_ERROR_EVENTS = 12
MAX_FILES = 50
# traceback frames and their source lines are in the excerpt: the event table lists events, not frames
FRAME_EVENTS = ("traceback_frame", "traceback_code", "chained_exception")


def shown_line(text: str | None, n_chars: int | None = None) -> str:
    """A log line of `n_chars` characters (default: all of `text`) as a report shows it: cut to
    SHOWN_LINE_CHARS characters, credentials masked."""
    text = text or ""
    n_chars = len(text) if n_chars is None else n_chars
    if n_chars > SHOWN_LINE_CHARS:
        text = f"{text[:SHOWN_LINE_CHARS]} … (cut: {n_chars:,} characters)"
    return mask_secrets(text)


def causal_line(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The line that explains the end (its root cause), else the last line of a run that did not complete."""
    if summary.get("root_cause_text") or summary.get("root_cause_line_no") is not None:
        return {"file": summary.get("root_cause_file"), "line_no": summary.get("root_cause_line_no"),
                "text": shown_line(summary.get("root_cause_text")), "kind": "cause",
                "role": file_role(summary, summary.get("root_cause_file"))}
    if (summary.get("failure_class") != "completed" and summary.get("last_line_no") is not None
            and summary.get("last_line_file")):
        return {"file": summary.get("last_line_file"), "line_no": summary.get("last_line_no"),
                "text": shown_line(summary.get("last_line_text")), "kind": "last_line",
                "role": file_role(summary, summary.get("last_line_file"))}
    return None


def context_lines(con: duckdb.DuckDBPyConnection,
                  lines: dict[str, dict[str, Any] | None]) -> dict[str, list[dict[str, Any]]]:
    """Per run, the lines around its `line` in that line's file; a step line (hundreds of metrics) folded to
    its head."""
    wanted = {rid: line for rid, line in lines.items()
              if line and line["file"] and line["line_no"] is not None}
    if not wanted or not columns(con, "log_lines"):
        return {}
    found = rows(
        con,
        "select l.run_id, l.line_no, l.kind, l.line_no = w.line_no as is_cause, "
        "case when l.kind = 'step_metrics' and length(l.text) > $fold "
        "then left(l.text, $fold) || format(' … ({} metrics)', length(l.text) - length(replace(l.text, ' - ', '')) // 3) "
        "else left(l.text, $cut) end as text, length(l.text) as n_chars from log_lines l "
        "join (select unnest($runs) as run_id, unnest($files) as file, unnest($line_nos) as line_no) w "
        "on l.run_id = w.run_id and l.file = w.file and l.line_no between w.line_no - $n and w.line_no + $n "
        "order by l.run_id, l.line_no",
        {"runs": list(wanted), "files": [line["file"] for line in wanted.values()],
         "line_nos": [int(line["line_no"]) for line in wanted.values()], "n": CONTEXT_LINES,
         "fold": FOLDED_STEP_LINE, "cut": SHOWN_LINE_CHARS},
    )
    for r in found:
        n_chars = r.pop("n_chars")
        r["text"] = shown_line(r["text"], None if r["kind"] == "step_metrics" else n_chars)
    return by_run(found)


def error_events(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per run, its last error and warning events (those next to the end), in log order: in a log of several
    launches, the last launch's (run_launches), as the rest of the report is about that run."""
    if not columns(con, "run_events"):
        return {}
    launch = (f"left join run_launches as la using (run_id) where {in_last_launch('e')} and"
              if columns(con, "run_launches") else "where")
    # max_by(row, key, n) keeps each run's last n events in a heap: cheaper than a window sorting them all
    found = rows(
        con,
        "select run_id, * exclude (run_id) from (select unnest(last, recursive := true) from ("
        "select max_by(e, (coalesce(e.segment, 0), e.file, e.line_no), $n) as last from run_events e "
        f"{launch} list_contains($ids, e.run_id) and not list_contains($frames, e.event_class) group by e.run_id)) "
        "order by run_id, coalesce(segment, 0), file, line_no",
        {"ids": run_ids, "n": MAX_ERROR_EVENTS, "frames": list(FRAME_EVENTS)},
    )
    for r in found:
        if "message" in r:
            r["message"] = shown_line(r["message"])
    return by_run(found)


def error_lines(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per run, how many of its error lines a rule names and how many none does (traceback furniture aside;
    every named event counts where run_events has no `kind`, as in hand-made tables)."""
    have = columns(con, "run_events")
    counts = {rid: {"named": 0, "unnamed": 0} for rid in run_ids}
    if not have:
        return counts
    errors = "kind = 'error'" if "kind" in have else "event_class <> 'warning_other'"
    found = rows(con, "select run_id, count(*) filter (event_class <> 'error_other') as named, "
                      "count(*) filter (event_class = 'error_other') as unnamed "
                      f"from run_events where list_contains($ids, run_id) and {errors} "
                      "and not list_contains($furniture, event_class) group by run_id",
                 {"ids": run_ids, "furniture": list(FURNITURE)})
    counts.update((rid, group[0]) for rid, group in by_run(found).items())
    return counts


def file_role(summary: dict[str, Any], file: str | None) -> str | None:
    """The role of one of the run's files (runs.file_roles, else told by its name)."""
    if not file:
        return None
    recorded = {r["file"]: r["role"] for r in summary.get("file_roles") or []}
    return recorded.get(file) or role_of(file)


def line_counts(con: duckdb.DuckDBPyConnection,
                run_ids: list[str]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Per run, how many lines of each kind its log has (most first), and the lines, errors and unclassified
    lines of each of its files (the MAX_FILES largest): one scan of log_lines for both."""
    if not columns(con, "log_lines"):
        return {}, {}
    kinds: dict[str, Counter[str]] = {}
    files: dict[str, dict[str, Counter[str]]] = {}
    for r in rows(con, "select run_id, file, kind, count(*) as n from log_lines where list_contains($ids, run_id) "
                       "group by all", {"ids": run_ids}):
        kinds.setdefault(r["run_id"], Counter())[r["kind"] or "other"] += r["n"]
        per_file = files.setdefault(r["run_id"], {}).setdefault(r["file"], Counter(n=0, errors=0, other=0))
        per_file["n"] += r["n"]
        if r["kind"] in ("error", "other"):
            per_file["errors" if r["kind"] == "error" else "other"] += r["n"]
    by_kind = {rid: [{"kind": k, "n": n} for k, n in sorted(c.items(), key=lambda kn: (-kn[1], kn[0]))]
               for rid, c in kinds.items()}
    by_file = {rid: [{"file": f, **c} for f, c in sorted(fs.items(), key=lambda fc: (-fc[1]["n"], fc[0] is None,
                                                                                     fc[0] or ""))[:MAX_FILES]]
               for rid, fs in files.items()}
    return by_kind, by_file
