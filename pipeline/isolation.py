"""One bad run never takes its batch down.

A batched step (ingest, a derived table, scoring, the run reports) that fails is tried again on each half of
its runs, down to one run. A run that still fails alone is marked as not analysed: the problem goes into its
`runs.problems` (run_summary's `analysis_error` reads it from there), its partition of the failed table is
removed so nothing stale stands in for it, and the next analysis ingests it again
(`incremental.ingest_is_current`). The rest of the batch completes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import lake, tables
from pipeline.vocabulary import NOT_ANALYSED

# the characters of an error kept in a problem: its first line, cut here
ERROR_CHARS = 400
SUMMARY = "run_summary"

T = TypeVar("T")
R = TypeVar("R")


def isolate(items: Sequence[T], work: Callable[[list[T]], R]) -> tuple[list[R], dict[int, str]]:
    """`work` over `items`, and where it raises, over each half again, down to one item.

    Returns what the calls that succeeded returned, and the error of each item that failed alone (by index).
    """
    results: list[R] = []
    failed: dict[int, str] = {}
    pending = [list(range(len(items)))] if items else []
    while pending:
        group = pending.pop()
        try:
            results.append(work([items[i] for i in group]))
        except Exception as exc:  # noqa: BLE001 - any failure of one run's data is that run's, not the batch's
            if len(group) == 1:
                failed[group[0]] = describe(exc)
            else:
                half = len(group) // 2
                pending += [group[half:], group[:half]]
    return results, failed


def describe(exc: BaseException) -> str:
    """The error as its type and message."""
    return f"{type(exc).__name__}: {exc}"


def problem(step: str, error: str) -> str:
    """The problem a run gets when `step` failed on it alone: the error's first line, cut to ERROR_CHARS."""
    first = (error.strip().splitlines() or [""])[0]
    if len(first) > ERROR_CHARS:
        first = first[: ERROR_CHARS - 3] + "..."
    return f"{NOT_ANALYSED}: {step} failed: {first}"


def _read_partition(warehouse: str | Path, table: str, run_id: str, columns: list[str] | None = None) -> pa.Table | None:
    """A run's partition of `table` (only `columns`, when given), or None when it is missing, unreadable or lacks
    one of `columns`."""
    folder = lake.run_partition_dir(warehouse, table, run_id)
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    try:
        return pa.concat_tables([pq.read_table(f, columns=columns) for f in files]) if files else None
    except (OSError, pa.ArrowException):
        return None


def _with_column(data: pa.Table, name: str, values: pa.Array) -> pa.Table:
    if name in data.column_names:
        return data.set_column(data.column_names.index(name), name, values)
    return data.append_column(name, values)


def mark_not_analysed(warehouse: str | Path, run_id: str, step: str, error: str,
                      summary_schema: Callable[[str], pa.Schema | None] | None = None) -> str:
    """Record that `step` failed on `run_id` alone; returns the problem recorded.

    The run's `runs` row gets the problem (a row of its own, of ingest's columns, when ingest wrote none), its
    run_summary row the `analysis_error`, and its partition of the failed table is removed. A run without a
    run_summary row gets one with the columns `summary_schema` gives for it (none but the error where it gives
    none), so the tables that read run_summary still bind when it is the only run they read.
    """
    text = problem(step, error)
    runs = _read_partition(warehouse, "runs", run_id)
    if runs is None or runs.num_rows == 0:
        # imported here: the ingest package loads its parsers (and pandas, through pyarrow), which this module's
        # other users need not
        from pipeline.ingest.schemas import RUNS_SCHEMA

        # every column ingest writes, so the SQL that reads the run's row binds when it is the only run
        runs = pa.Table.from_pylist([{"problems": [text]}], RUNS_SCHEMA)
    else:
        listed = [list(p or []) for p in runs.column("problems").to_pylist()] if "problems" in runs.column_names \
            else [[] for _ in range(runs.num_rows)]
        runs = _with_column(runs, "problems", pa.array([p + [text] for p in listed], pa.list_(pa.string())))
    if "run_id" in runs.column_names:  # the partition folder names the run
        runs = runs.drop_columns(["run_id"])
    lake.write_run_table(warehouse, "runs", run_id, runs)
    if step in tables.per_run_tables():
        lake.delete_run(warehouse, run_id, [step])
    summary = _read_partition(warehouse, SUMMARY, run_id)
    if summary is None or summary.num_rows == 0:
        schema = (summary_schema and summary_schema(run_id)) or pa.schema([("failure_class", pa.string())])
        summary = pa.Table.from_pylist([{}], schema)
    errors = summary.column("analysis_error").to_pylist() if "analysis_error" in summary.column_names \
        else [None] * summary.num_rows
    joined = pa.array(["; ".join(filter(None, (old, text))) for old in errors], pa.string())
    summary = _with_column(summary, "analysis_error", joined)
    if "run_id" in summary.column_names:
        summary = summary.drop_columns(["run_id"])
    lake.write_run_table(warehouse, SUMMARY, run_id, summary)
    return text


def not_analysed(warehouse: str | Path, run_ids: Sequence[str]) -> dict[str, list[str]]:
    """The runs of `run_ids` marked as not analysed, with their problems saying why."""
    out = {}
    for run_id in run_ids:
        runs = _read_partition(warehouse, "runs", run_id, ["problems"])
        if runs is None:
            continue
        marked = [p for row in runs.column("problems").to_pylist() for p in (row or []) if p.startswith(NOT_ANALYSED)]
        if marked:
            out[run_id] = marked
    return out


def isolated_runs(warehouse: str | Path, step: str, run_ids: Sequence[str], work: Callable[[list[str]], R],
                  log=None, summary_schema: Callable[[str], pa.Schema | None] | None = None,
                  ) -> tuple[list[R], list[str]]:
    """`isolate` over run ids, each run that fails alone marked (`mark_not_analysed`, given `summary_schema`) and
    logged as an error.

    Returns the results of the calls that succeeded and the runs that did. When every run of a batch of several
    failed alone, the step itself is broken, not the runs: it raises, after marking them.
    """
    results, failed = isolate(list(run_ids), work)
    for index, error in sorted(failed.items()):
        text = mark_not_analysed(warehouse, run_ids[index], step, error, summary_schema)
        if log is not None:
            log.error(f"{run_ids[index]}: {text}")
    if len(run_ids) > 1 and len(failed) == len(run_ids):
        raise RuntimeError(f"{step} failed on each of the {len(run_ids)} runs of its batch: {failed[0]}")
    return results, [r for i, r in enumerate(run_ids) if i not in failed]
