"""Everything a run report shows, read from the warehouse tables (missing tables come back empty)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake
from pipeline.error_templates import unknown_templates_of_run
from pipeline.report import evidence, signals
from pipeline.report.advice import Advice, advice_entry, run_config
from pipeline.report.episodes import Episode, load_episodes
from pipeline.report.labels import COMPLETENESS_LABELS, CONFIG_LABELS
from pipeline.report.samples import RunSamples, load_samples
from pipeline.report.warehouse import add_views, columns, connect, one, rows, series, table_rows

MAX_EARLIER_RUNS = 10


@dataclass
class RunReportData:
    """Everything the run report shows, read from the warehouse."""

    run_id: str
    summary: dict[str, Any]
    facts: dict[str, Any]
    completeness: dict[str, Any]
    problems: list[str]
    lines_by_kind: list[dict[str, Any]]
    lines_by_file: list[dict[str, Any]]
    root_cause: dict[str, Any] | None
    context: list[dict[str, Any]]
    error_events: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    phases: dict[str, np.ndarray]
    health: dict[str, np.ndarray]
    anomaly_steps: np.ndarray
    episodes: list[Episode]
    baseline: dict[str, Any]
    earlier_runs: list[dict[str, Any]]
    failure_advice: Advice = field(default_factory=Advice)
    run_advice: list[dict[str, Any]] = field(default_factory=list)
    peers: signals.Peers = field(default_factory=lambda: signals.Peers("config group", None, []))
    signals: list[signals.Signal] = field(default_factory=list)
    validation: list[signals.Validation] = field(default_factory=list)
    samples: RunSamples = field(default_factory=lambda: RunSamples([], 0))
    unknown_templates: list[dict[str, Any]] = field(default_factory=list)


def load_run(warehouse: str | Path, run_id: str) -> RunReportData:
    """Read one run's tables, and the earlier runs of its config group that its comparisons need."""
    run_id = lake.check_run_id(run_id)
    con = connect(warehouse, [run_id])
    try:
        peers = signals.earlier_peers(con, run_id)
        if peers.run_ids:
            add_views(con, warehouse, [run_id, *peers.run_ids])
        data = _read(con, run_id, peers)
        errors = evidence.error_lines(con, run_id)
        if errors["unnamed"] and not errors["named"]:
            data.unknown_templates = _unknown_errors(warehouse, run_id)
        return data
    finally:
        con.close()


def _unknown_errors(warehouse: str | Path, run_id: str) -> list[dict[str, Any]]:
    """A run whose errors no rule names: its templates (error_templates), when one of them is an error."""
    found = unknown_templates_of_run(warehouse, run_id)
    return found if any(t["kind"] == "error" for t in found) else []


def _read(con: duckdb.DuckDBPyConnection, run_id: str, peers: signals.Peers) -> RunReportData:
    summary = _summary(con, run_id)
    root_cause = evidence.causal_line(summary)
    anomaly_steps, episodes = load_episodes(con, run_id, run_config(summary))
    run_advice = table_rows(con, "run_advice", "run_id = $run_id", {"run_id": run_id}, "rank")
    return RunReportData(
        run_id=run_id,
        summary=summary,
        facts={k: summary[k] for k in CONFIG_LABELS if summary.get(k) is not None},
        completeness={k: summary.get(k) for k in COMPLETENESS_LABELS},
        problems=[str(p) for p in (summary.get("problems") or [])],
        lines_by_kind=evidence.lines_by_kind(con, run_id),
        lines_by_file=evidence.lines_by_file(con, run_id),
        root_cause=root_cause,
        context=evidence.context_lines(con, run_id, root_cause),
        error_events=evidence.error_events(con, run_id),
        findings=_findings(con, run_id),
        phases=series(con, "step_phases", run_id),
        health=series(con, "step_health", run_id),
        anomaly_steps=anomaly_steps,
        episodes=episodes,
        baseline=one(con, "run_baselines", run_id),
        earlier_runs=_earlier_runs(con, run_id),
        failure_advice=_failure_advice(summary, run_advice),
        run_advice=run_advice,
        peers=peers,
        signals=signals.load_signals(con, run_id, peers.run_ids),
        validation=signals.load_validation(con, run_id, peers.run_ids),
        samples=load_samples(con, run_id, episodes),
    )


def _summary(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    """run_summary's row over the `runs` row (what the summary leaves null, the ingest may know)."""
    summary, runs_row = one(con, "run_summary", run_id), one(con, "runs", run_id)
    if not summary and not runs_row:
        raise LookupError(f"run {run_id!r} is not in the warehouse")
    return {**runs_row, **{k: v for k, v in summary.items() if v is not None}}


def _findings(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    if not columns(con, "config_findings"):
        return []
    return rows(con, "select * exclude (run_id) from config_findings where run_id = $run_id "
                     "order by case severity when 'error' then 0 when 'warning' then 1 else 2 end, finding",
                {"run_id": run_id})


def _earlier_runs(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """Up to ten runs of the same experiment that ended before this one, newest first (run_baselines)."""
    if "ended_at" not in columns(con, "run_baselines"):
        return []
    return rows(con, "select b.run_id, b.failure_class, b.last_step, b.expected_steps, b.median_step_s, b.goodput, "
                     "b.bottleneck_phase, b.ended_at, b.ended_by_file_time from run_baselines b join run_baselines me "
                     "on me.run_id = $run_id and b.experiment_name = me.experiment_name and b.run_id <> me.run_id "
                     "and (me.ended_at is null or b.ended_at is null or b.ended_at < me.ended_at) "
                     "order by b.ended_at desc nulls last, b.run_id desc limit $n",
                {"run_id": run_id, "n": MAX_EARLIER_RUNS})


def _failure_advice(summary: dict[str, Any], run_advice: list[dict[str, Any]]) -> Advice:
    advice = advice_entry("failure", summary.get("failure_class"))
    if run_advice:
        # the run's own rows replace the class's generic list of changes
        advice.changes = []
    return advice
