"""Everything a run report shows, read from the warehouse tables (missing tables come back empty)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from pipeline import lake
from pipeline.error_templates import caught_errors_of_run, unknown_templates_of_run
from pipeline.report import evidence, signals
from pipeline.report.advice import by_episode
from pipeline.report.episodes import Episode, load_episodes
from pipeline.report.labels import COMPLETENESS_LABELS, CONFIG_LABELS
from pipeline.report.samples import RunSamples, load_samples
from pipeline.report.warehouse import add_views, by_run, columns, connect, firsts, rows, series, table_rows
from pipeline.vocabulary import NOT_FAILED

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
    run_advice: list[dict[str, Any]] = field(default_factory=list)
    setup: dict[str, Any] = field(default_factory=dict)  # run_facts: its device, engine and roles
    peers: signals.Peers = field(default_factory=lambda: signals.Peers("config group", None, []))
    signals: list[signals.Signal] = field(default_factory=list)
    validation: list[signals.Validation] = field(default_factory=list)
    samples: RunSamples = field(default_factory=lambda: RunSamples([], 0))
    unknown_templates: list[dict[str, Any]] = field(default_factory=list)
    caught_errors: list[dict[str, Any]] = field(default_factory=list)  # errors a run no error ended went on from


def load_runs(warehouse: str | Path, run_ids: list[str]) -> Iterator[RunReportData]:
    """Each run's report data, in the order of `run_ids`: its tables, and the earlier runs of its config group
    that its comparisons need, every table read in one statement for the whole batch."""
    run_ids = list(dict.fromkeys(lake.check_run_id(r) for r in run_ids))
    con = connect(warehouse, run_ids)
    try:
        peers = signals.earlier_peers(con, run_ids)
        if len(compared := signals.compared_runs(peers)) > len(run_ids):
            add_views(con, warehouse, compared, only=signals.TABLES)
        read = _Batch(con, run_ids, peers)
    finally:
        con.close()
    for run_id in run_ids:
        data = read.run(run_id)
        errors = read.errors[run_id]
        if errors["unnamed"] and not errors["named"]:
            data.unknown_templates = _unknown_errors(warehouse, run_id)
        if data.summary.get("failure_class") in NOT_FAILED + ("hang",):
            data.caught_errors = [c for c in caught_errors_of_run(warehouse, run_id) if not _after_the_end(c, data)]
        yield data


def _after_the_end(caught: dict[str, Any], data: RunReportData) -> bool:
    """Whether an error's first line comes after the line that ended the run (a stop's shutdown noise, such as
    the exceptions atexit ignores after a Ctrl-C): the run did not go on from it."""
    s = data.summary
    return (s.get("root_cause_line_no") is not None and caught["first_file"] == s.get("root_cause_file")
            and caught["first_line_no"] > s["root_cause_line_no"])


def load_run(warehouse: str | Path, run_id: str) -> RunReportData:
    """Read one run's tables, and the earlier runs of its config group that its comparisons need."""
    return next(load_runs(warehouse, [run_id]))


def _unknown_errors(warehouse: str | Path, run_id: str) -> list[dict[str, Any]]:
    """A run whose errors no rule names: its templates (error_templates), when one of them is an error."""
    found = unknown_templates_of_run(warehouse, run_id)
    return found if any(t["kind"] == "error" for t in found) else []


class _Batch:
    """A batch's rows of every table a run report reads, grouped by run."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run_ids: list[str], peers: dict[str, signals.Peers]):
        self.peers = peers
        self.summaries = _summaries(con, run_ids)
        self.root_causes = {rid: evidence.causal_line(s) for rid, s in self.summaries.items()}
        ids = {"ids": run_ids}
        self.run_advice = {rid: by_episode(rows) for rid, rows in by_run(
            table_rows(con, "run_advice", "list_contains($ids, run_id)", ids, "run_id, rank"),
            drop=False).items()}
        self.episodes = load_episodes(con, run_ids, {rid: eps for rid, (_, eps) in self.run_advice.items()})
        self.lines_by_kind, self.lines_by_file = evidence.line_counts(con, run_ids)
        self.context = evidence.context_lines(con, self.root_causes)
        self.error_events = evidence.error_events(con, run_ids)
        self.errors = evidence.error_lines(con, run_ids)
        self.findings = _findings(con, run_ids)
        self.phases = series(con, "step_phases", run_ids)
        self.health = series(con, "step_health", run_ids)
        self.baselines = firsts(con, "run_baselines", run_ids)
        self.setups = firsts(con, "run_facts", run_ids)
        self.earlier_runs = _earlier_runs(con, run_ids)
        self.signals = signals.load_signals(con, peers)
        self.validation = signals.load_validation(con, peers)
        self.samples = load_samples(con, {rid: episodes for rid, (_, episodes) in self.episodes.items()})

    def run(self, run_id: str) -> RunReportData:
        """One run's report data."""
        summary = self.summaries[run_id]
        anomaly_steps, episodes = self.episodes[run_id]
        run_advice, _ = self.run_advice.get(run_id, ([], {}))
        return RunReportData(
            run_id=run_id,
            summary=summary,
            facts={k: summary[k] for k in CONFIG_LABELS if summary.get(k) is not None},
            completeness={k: summary.get(k) for k in COMPLETENESS_LABELS},
            problems=[str(p) for p in (summary.get("problems") or [])],
            lines_by_kind=self.lines_by_kind.get(run_id, []),
            lines_by_file=self.lines_by_file.get(run_id, []),
            root_cause=self.root_causes[run_id],
            context=self.context.get(run_id, []),
            error_events=self.error_events.get(run_id, []),
            findings=self.findings.get(run_id, []),
            phases=self.phases.get(run_id, {}),
            health=self.health.get(run_id, {}),
            anomaly_steps=anomaly_steps,
            episodes=episodes,
            baseline=self.baselines.get(run_id, {}),
            setup=self.setups.get(run_id, {}),
            earlier_runs=self.earlier_runs.get(run_id, []),
            run_advice=run_advice,
            peers=self.peers[run_id],
            signals=self.signals[run_id],
            validation=self.validation.get(run_id, []),
            samples=self.samples[run_id],
        )


def _summaries(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per run, run_summary's row over its `runs` row (what the summary leaves null, the ingest may know)."""
    summaries, runs = firsts(con, "run_summary", run_ids), firsts(con, "runs", run_ids)
    out = {}
    for rid in run_ids:
        summary, runs_row = summaries.get(rid, {}), runs.get(rid, {})
        if not summary and not runs_row:
            raise LookupError(f"run {rid!r} is not in the warehouse")
        out[rid] = {**runs_row, **{k: v for k, v in summary.items() if v is not None}}
    return out


def _findings(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    if not columns(con, "config_findings"):
        return {}
    return by_run(rows(con, "select run_id, * exclude (run_id) from config_findings where list_contains($ids, run_id) "
                            "order by run_id, case severity when 'error' then 0 when 'warning' then 1 else 2 end, "
                            "finding", {"ids": run_ids}))


def _earlier_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per run, up to ten runs of the same experiment that ended before it, newest first (run_baselines)."""
    if "ended_at" not in columns(con, "run_baselines"):
        return {}
    return by_run(rows(con, "select me.run_id as me, b.run_id, b.failure_class, b.last_step, b.expected_steps, "
                            "b.median_step_s, b.goodput, b.bottleneck_phase, b.ended_at, b.ended_by_file_time "
                            "from run_baselines b join run_baselines me on list_contains($ids, me.run_id) "
                            "and b.experiment_name = me.experiment_name and b.run_id <> me.run_id "
                            "and (me.ended_at is null or b.ended_at is null or b.ended_at < me.ended_at) "
                            "qualify row_number() over (partition by me.run_id "
                            "order by b.ended_at desc nulls last, b.run_id desc) <= $n "
                            "order by me.run_id, b.ended_at desc nulls last, b.run_id desc",
                       {"ids": run_ids, "n": MAX_EARLIER_RUNS}), "me")

