"""Data-quality rules behind the asset checks: pure functions over the warehouse, parameters bound."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb

from pipeline import tables
from pipeline.lake import reader, table_source
from pipeline.settings import setting


def lines_conserved(warehouse: str | Path, run_ids: list[str]) -> dict[str, dict]:
    """Runs whose `log_lines` row count differs from the lines in their raw bytes (`runs.n_lines_read`)."""
    with reader(warehouse, run_ids=run_ids, only=["runs", "log_lines"]) as con:
        if not _has(con, "runs") or not _has(con, "log_lines"):
            return {r: {"error": "runs or log_lines missing"} for r in run_ids}
        rows = con.execute(
            """
            with wanted as (select unnest($run_ids::varchar[]) as run_id),
            lines as (select run_id, count(*) as n from log_lines where run_id in (select run_id from wanted)
                      group by all)
            select w.run_id, r.n_lines_read, coalesce(l.n, 0)
            from wanted w left join runs r using (run_id) left join lines l using (run_id)
            where r.n_lines_read is null or r.n_lines_read <> coalesce(l.n, 0)
            """,
            {"run_ids": run_ids},
        ).fetchall()
    return {rid: {"read": n_read, "kept": n_kept} for rid, n_read, n_kept in rows}


def steps_contiguous(warehouse: str | Path, run_ids: list[str]) -> dict[str, list[list[int]]]:
    """Gaps between consecutive logged steps within a segment, per run (first gaps only)."""
    with reader(warehouse, run_ids=run_ids, only=["step_metrics"]) as con:
        if not _has(con, "step_metrics"):
            return {}
        rows = con.execute(
            """
            with steps as (
                select distinct run_id, segment, step from step_metrics
                where run_id in (select unnest($run_ids::varchar[]))
            ), gaps as (
                select run_id, step, lag(step) over (partition by run_id, segment order by step) as prev
                from steps
            )
            select run_id, list([prev, step] order by step)[1:5] from gaps where step - prev > 1 group by all
            """,
            {"run_ids": run_ids},
        ).fetchall()
    return {rid: gaps for rid, gaps in rows}


def phase_sums_consistent(warehouse: str | Path, run_ids: list[str], tolerance: float = 0.01) -> dict[str, int]:
    """Runs with steps whose phase shares do not sum to 1 (within `tolerance`), with the count of such steps."""
    src = table_source(warehouse, "step_phases", run_ids)
    if src is None:
        return {}
    with reader(warehouse, only=()) as con:
        shares = sorted(c for c in _columns(con, src) if c.startswith("share_"))
        if not shares:
            return {r: -1 for r in run_ids}
        total = " + ".join(f"coalesce({c}, 0)" for c in shares)
        rows = con.execute(
            f"""
            select run_id, count(*) from {src}
            where run_id in (select unnest($run_ids::varchar[])) and step_time > 0
              and abs(({total}) - 1) > $tol
            group by all
            """,
            {"run_ids": run_ids, "tol": tolerance},
        ).fetchall()
    return dict(rows)


def contract_violations(warehouse: str | Path, table: str, run_ids: list[str] | None = None) -> list[str]:
    """Contract columns that `table` lacks (empty when it matches the design contract).

    With `run_ids`, only those runs' partitions are read: the ones just written (none: nothing to check).
    """
    if run_ids is not None and not run_ids:
        return []
    src = table_source(warehouse, table, run_ids)
    if src is None:
        return [f"table {table} missing"]
    with reader(warehouse, only=()) as con:
        return sorted(tables.contract(table) - _columns(con, src))


def _columns(con: duckdb.DuckDBPyConnection, src: str) -> set[str]:
    """The columns of a `lake.table_source` (binding it reads the footer of each of its files, once)."""
    return {c for (c, *_) in con.execute(f"describe select * from {src}").fetchall()}


def refit_after_days() -> float:
    """Days after which the anomaly model is refitted: VERL_HEALTH_REFIT_DAYS, read when asked."""
    return float(setting("VERL_HEALTH_REFIT_DAYS"))


def model_refit_due(model_age: float | None, limit_days: float | None = None) -> bool:
    """True when the stored model is missing or at least `limit_days` (default `refit_after_days()`) old."""
    return model_age is None or model_age >= (refit_after_days() if limit_days is None else limit_days)


def model_age_days(warehouse: str | Path, now: float | None = None) -> float | None:
    """Days from the anomaly model's fit to `now` (epoch seconds; default: the clock), or None when
    there is no model."""
    meta = Path(warehouse) / "models" / "anomaly_model.json"
    if not meta.is_file():
        return None
    try:
        fitted = json.loads(meta.read_text()).get("fitted_at_unix")
    except (OSError, ValueError, AttributeError):  # a damaged description: no model to trust
        return None
    ref = fitted if fitted is not None else meta.stat().st_mtime
    return ((time.time() if now is None else now) - ref) / 86400.0


def _has(con, table: str) -> bool:
    return bool(
        con.execute(
            "select count(*) from duckdb_views() where view_name = $t", {"t": table}
        ).fetchone()[0]
    )
