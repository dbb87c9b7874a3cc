"""Render the run and fleet reports from one Jinja2 environment with autoescaping on."""

from __future__ import annotations

import math
import os
import re
import statistics
import uuid
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, Undefined

from pipeline import lake
from pipeline.error_templates import NEW_DAYS, new_signatures
from pipeline.report import charts
from pipeline.report.data import (
    AFTER_STEP_PHASES,
    FAILED_CLASSES,
    STEP_PHASES,
    FleetReportData,
    FleetRun,
    RunReportData,
    advice_entry,
    config_group,
    load_fleet,
    load_run,
)

TEMPLATES = Path(__file__).parent / "templates"

CLASS_LABELS = {
    "completed": "Completed",
    "cuda_oom": "CUDA OOM",
    "nccl_timeout": "NCCL timeout",
    "ray_actor_died": "Ray worker died",
    "host_oom_killed": "Worker killed for host memory",
    "hang": "Hung",
    "interrupted": "Stopped",
    "no_outcome": "No outcome in the log",
    "nan_divergence": "NaN divergence",
    "python_exception": "Python exception",
    "vllm_engine_error": "Rollout engine error",
    "unknown": "Ended for an unknown reason",
}
STOP_WORDS = {
    "keyboard": "Stopped with Ctrl-C",
    "sigterm": "Stopped by SIGTERM",
    "cancelled": "Cancelled by the scheduler",
    "time_limit": "Stopped at the scheduler's time limit",
}
EXCEPTION_RE = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Interrupt))\b")


def fmt_duration(seconds: Any) -> str:
    """'2 h 14 m', '3 m 5 s', '42 s'; '–' when unknown."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "–"
    s = int(round(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d} d {h} h"
    if h:
        return f"{h} h {m} m"
    if m:
        return f"{m} m {sec} s"
    return f"{sec} s"


def fmt_num(value: Any, digits: int = 3) -> str:
    """Numbers for tables: ints with thin separators, floats with `digits` significant digits."""
    if value is None or isinstance(value, Undefined):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        v = float(value)
        if not math.isfinite(v):
            return str(v)
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        if 1e3 <= abs(v) < 1e15:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, list | tuple):
        return ", ".join(fmt_num(v, digits) for v in value)
    return str(value)


def fmt_pct(value: Any, digits: int = 0) -> str:
    """A fraction as a percentage."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"{100 * value:.{digits}f} %"


def fmt_ratio(value: Any) -> str:
    """'×1.23' for a ratio to a baseline."""
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    return f"×{value:.2f}"


def run_href(run_id: str, prefix: str = "../runs/") -> str | None:
    """Relative link to a run report inside the reports folder, or None for an id that is not valid."""
    try:
        return f"{prefix}{lake.check_run_id(str(run_id))}.html"
    except ValueError:
        return None


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(duration=fmt_duration, num=fmt_num, pct=fmt_pct, ratio=fmt_ratio)
    env.globals.update(class_label=lambda c: CLASS_LABELS.get(c or "unknown", str(c)), run_href=run_href)
    return env


ENV = _environment()


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def verdict(summary: dict[str, Any], n_episodes: int) -> dict[str, str]:
    """Banner tone, headline and the one sentence a person would say about the run."""
    cls = summary.get("failure_class") or "unknown"
    last = summary.get("last_step")
    expected = summary.get("expected_steps")
    phase = summary.get("failure_phase")
    wall = summary.get("wall_time_s")
    after = f" after {fmt_duration(wall)}" if wall else ""
    where = f" in {phase}" if phase else ""
    at = f" at step {fmt_num(last)}" if last is not None else ""
    if cls == "completed":
        steps = f"{fmt_num(last)} of {fmt_num(expected)} steps" if expected else f"{fmt_num(last)} steps"
        if n_episodes:
            tone, head = "warn", f"Completed with {n_episodes} anomaly episode{'s' if n_episodes != 1 else ''}"
            sentence = f"Completed {steps}{' in ' + fmt_duration(wall) if wall else ''}; {n_episodes} anomaly episode{'s' if n_episodes != 1 else ''} to review"
        else:
            tone, head = "ok", "Healthy"
            sentence = f"Completed {steps}{' in ' + fmt_duration(wall) if wall else ''} with no anomalies"
        return {"tone": tone, "headline": head, "sentence": sentence + ".", "cls": cls}
    if cls == "hang":
        why = summary.get("hang_reason") or "the log stops with no error"
        hung = summary.get("hang_duration_s")
        for_how_long = f" for {fmt_duration(hung)}" if hung else ""
        sentence = f"Hung{where}{for_how_long} after step {fmt_num(last)}: {why}"
        return {"tone": "bad", "headline": "Hung", "sentence": sentence + ".", "cls": cls}
    of_total = f" of {fmt_num(expected)}" if expected else ""
    if cls == "interrupted":
        stop = STOP_WORDS.get(summary.get("stop_reason"), "Stopped")
        sentence = f"{stop}{where} after step {fmt_num(last)}{of_total}"
        return {"tone": "warn", "headline": CLASS_LABELS[cls], "sentence": sentence + ".", "cls": cls}
    if cls == "no_outcome":
        sentence = (f"The log ends at step {fmt_num(last)}{of_total}{where} with no outcome: still running when "
                    "archived, or stopped without a trace")
        return {"tone": "warn", "headline": CLASS_LABELS[cls], "sentence": sentence + ".", "cls": cls}
    label = CLASS_LABELS.get(cls, cls)
    if cls == "python_exception":
        found = EXCEPTION_RE.search(summary.get("root_cause_text") or "")
        if found:
            label = found.group(1)
    sentence = f"{label}{where}{at}{after}"
    return {"tone": "bad", "headline": CLASS_LABELS.get(cls, cls), "sentence": sentence + ".", "cls": cls}


def _phase_table(data: RunReportData) -> list[dict[str, Any]]:
    ph = data.phases
    step_time = ph.get("step_time")
    total_step = float(np.nansum(step_time)) if step_time is not None else 0.0
    out = []
    for name in (*STEP_PHASES, "other_time", *AFTER_STEP_PHASES):
        v = ph.get(name)
        if v is None or not np.isfinite(v).any():
            continue
        label = "other" if name == "other_time" else name
        share = data.summary.get(f"share_{label}")
        if share is None and name not in AFTER_STEP_PHASES and total_step > 0:
            share = float(np.nansum(v)) / total_step
        out.append(
            {
                "phase": label,
                "median": float(np.nanmedian(v)),
                "p95": float(np.nanpercentile(v, 95)),
                "total": float(np.nansum(v)),
                "share": share,
                "in_step": name not in AFTER_STEP_PHASES,
            }
        )
    return out


def _health_panels(h: dict[str, np.ndarray]) -> list[charts.Panel]:
    def pick(*names):
        return [(n, h[n]) for n in names if n in h and np.isfinite(h[n]).any()]

    return [
        charts.Panel("Reward", pick("score_mean", "reward_mean", "val_core_mean")),
        charts.Panel("KL", pick("ppo_kl", "kl_loss", "reward_kl")),
        charts.Panel("Entropy", pick("entropy")),
        charts.Panel("Grad norm", pick("grad_norm", "critic_grad_norm"), log=True),
        charts.Panel("Response length & clip ratio", pick("response_length_mean"), right=pick("response_clip_ratio")),
        charts.Panel("Memory (GB)", pick("mem_allocated_gb", "mem_reserved_gb", "cpu_memory_used_gb")),
    ]


BASELINE_SHARES = ("gen", "old_log_prob", "update_actor", "other")


def _baseline_rows(baseline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This run against earlier runs of its experiment and of its config group (`run_baselines`)."""
    if not baseline or "exp_step_ratio" not in baseline[0]:
        return []
    b = baseline[0]
    out = []
    for scope, label in (("exp", "same experiment"), ("group", "same config group")):
        out.append(
            {
                "label": label,
                "name": b.get("experiment_name") if scope == "exp" else b.get("config_group"),
                "prior": b.get(f"{scope}_prior_runs"),
                "median": b.get(f"{scope}_median_step_s"),
                "ratio": b.get(f"{scope}_step_ratio"),
                "shares": [(p, b.get(f"{scope}_{p}_share_ratio")) for p in BASELINE_SHARES],
            }
        )
    return out


def run_context(data: RunReportData) -> dict[str, Any]:
    """The template context of a run report (charts drawn here)."""
    s = data.summary
    steps_p = data.phases.get("step", np.array([]))
    phase_series = {p: data.phases[p] for p in (*STEP_PHASES,) if p in data.phases}
    if "other_time" in data.phases:
        phase_series["other"] = data.phases["other_time"]
    phase_chart = charts.phase_chart(steps_p, phase_series)
    health_chart = charts.health_chart(
        data.health.get("step", np.array([])),
        _health_panels(data.health),
        [(e.first_step, e.last_step, e.anomaly_class) for e in data.episodes],
        data.anomaly_steps,
    )
    table = _phase_table(data)
    bottleneck = s.get("bottleneck_phase")
    if not bottleneck:
        in_step = [r for r in table if r["in_step"] and r["share"] is not None]
        bottleneck = max(in_step, key=lambda r: r["share"])["phase"] if in_step else None
    median_step = s.get("median_step_s")
    if median_step is None and "step_time" in data.phases and np.isfinite(data.phases["step_time"]).any():
        median_step = float(np.nanmedian(data.phases["step_time"]))
    earlier_steps = [r["median_step_s"] for r in data.earlier_runs if r.get("median_step_s")]
    comparison = None
    if median_step and earlier_steps:
        base = statistics.median(earlier_steps)
        comparison = {"base": base, "ratio": median_step / base if base else None, "n": len(earlier_steps)}
    return {
        "run_id": data.run_id,
        "generated": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "s": s,
        "verdict": verdict(s, len(data.episodes)),
        "facts": data.facts,
        "completeness": data.completeness,
        "problems": data.problems,
        "lines_by_kind": data.lines_by_kind,
        "lines_by_file": data.lines_by_file,
        "root_cause": data.root_cause,
        "context": data.context,
        "error_events": data.error_events,
        "findings": data.findings,
        "failure_advice": data.failure_advice,
        "run_advice": data.run_advice,
        "phase_table": table,
        "bottleneck": bottleneck,
        "median_step": median_step,
        "comparison": comparison,
        "earlier_runs": data.earlier_runs,
        "baseline": data.baseline,
        "baseline_rows": _baseline_rows(data.baseline),
        "baseline_shares": BASELINE_SHARES,
        "episodes": data.episodes,
        "n_anomalous_steps": len(data.anomaly_steps),
        "n_steps": len(data.health.get("step", steps_p)),
        "phase_chart": phase_chart,
        "health_chart": health_chart,
    }


def render_run_report(warehouse: str | Path, run_id: str, reports_dir: str | Path) -> Path:
    """Write `reports_dir/runs/<run_id>.html` for one run and return its path."""
    data = load_run(warehouse, run_id)
    html = ENV.get_template("run.html.j2").render(**run_context(data))
    return _write(Path(reports_dir) / "runs" / f"{lake.check_run_id(run_id)}.html", html)


def _median(values) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def _window(runs: list[FleetRun], start: date, end: date) -> dict[str, Any]:
    picked = [r for r in runs if r.ended_at is not None and start <= r.ended_at.date() <= end]
    failed = sum(r.failure_class in FAILED_CLASSES for r in picked)
    return {
        "runs": len(picked),
        "failed": failed,
        "failure_rate": failed / len(picked) if picked else None,
        "median_step_s": _median(r.median_step_s for r in picked),
        "goodput": _median(r.goodput for r in picked),
        "episodes": sum(r.episodes for r in picked),
    }


def _week_over_week(runs: list[FleetRun], day: date) -> list[dict[str, Any]]:
    this = _window(runs, day - timedelta(days=6), day)
    last = _window(runs, day - timedelta(days=13), day - timedelta(days=7))
    rows = []
    for key, label, kind, worse_if_up in (
        ("runs", "Runs ended", "num", None),
        ("failed", "Failed or hung", "num", True),
        ("failure_rate", "Failure rate", "pct", True),
        ("median_step_s", "Median step time (s)", "num", True),
        ("goodput", "Median goodput", "pct", False),
        ("episodes", "Anomaly episodes", "num", True),
    ):
        a, b = this[key], last[key]
        trend = ""
        if a is not None and b is not None and a != b and worse_if_up is not None:
            trend = "worse" if (a > b) == worse_if_up else "better"
        rows.append({"label": label, "this": a, "last": b, "kind": kind, "trend": trend})
    return rows


def _weeks(runs: list[FleetRun], day: date, n: int = 12) -> list[tuple[str, int, int, float | None]]:
    ended = [r.ended_at.date() for r in runs if r.ended_at is not None]
    if not ended:
        return []
    # Anchor on the newest run so an archive of older runs still shows its trend.
    day = min(day, max(ended))
    out = []
    for i in range(n - 1, -1, -1):
        end = day - timedelta(days=7 * i)
        w = _window(runs, end - timedelta(days=6), end)
        out.append((end.strftime("%m-%d"), w["runs"], w["failed"], w["median_step_s"]))
    while out and out[0][1] == 0:
        out.pop(0)
    return out


def _config_groups(runs: list[FleetRun]) -> list[dict[str, Any]]:
    groups: dict[str, list[FleetRun]] = {}
    for r in runs:
        groups.setdefault(r.config_group, []).append(r)
    out = []
    for name, members in groups.items():
        shares = {}
        for p in (*STEP_PHASES, "other"):
            m = _median(r.shares.get(p) for r in members if r.shares)
            if m:
                shares[p] = m
        bottlenecks = Counter(r.bottleneck_phase for r in members if r.bottleneck_phase)
        failed = sum(r.attention <= 1 for r in members)
        out.append(
            {
                "name": name,
                "runs": len(members),
                "failed": failed,
                "failure_rate": failed / len(members),
                "median_step_s": _median(r.median_step_s for r in members),
                "p90_step_s": _p90([r.median_step_s for r in members]),
                "goodput": _median(r.goodput for r in members),
                "bottleneck": bottlenecks.most_common(1)[0][0] if bottlenecks else None,
                "shares": shares,
            }
        )
    out.sort(key=lambda g: (-g["runs"], g["name"]))
    return out


def _groups_from_table(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Config groups as `fleet_config_groups` aggregates them (step-level medians and phase shares)."""
    out = []
    for g in table:
        shares = {p: g[f"share_{p}"] for p in (*STEP_PHASES, "other") if g.get(f"share_{p}")}
        in_step = {p: v for p, v in shares.items() if p != "other"}
        out.append(
            {
                "name": config_group({**g, "n_gpus_per_node": g.get("n_gpus"), "nnodes": 1}),
                "runs": g.get("runs") or 0,
                "failure_rate": g.get("failure_rate"),
                "median_step_s": g.get("median_step_s"),
                "p90_step_s": g.get("p90_step_s"),
                "goodput": g.get("mean_goodput"),
                "bottleneck": max(in_step, key=in_step.get) if in_step else None,
                "shares": shares,
            }
        )
    out.sort(key=lambda g: (-g["runs"], g["name"]))
    return out


def _p90(values) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.percentile(vals, 90)) if vals else None


MAX_ATTENTION_ROWS = 100
ATTENTION_DAYS = 7
MAX_CHART_GROUPS = 15


def fleet_context(data: FleetReportData) -> dict[str, Any]:
    """The template context of the fleet report (charts drawn here)."""
    runs = sorted(data.runs, key=lambda r: (r.ended_at is None, -(r.ended_at or datetime.min).timestamp()
                                            if r.ended_at else 0, r.run_id))
    attention = sorted((r for r in runs if r.attention < 3), key=lambda r: r.attention)
    # the windows end at the newest run's end when that is older than the report's day: an archive of
    # runs from months ago is not "quiet this week"
    newest = max((r.ended_at.date() for r in runs if r.ended_at is not None), default=None)
    data_day = min(data.day, newest) if newest else data.day
    since = data_day - timedelta(days=ATTENTION_DAYS - 1)
    recent = [r for r in attention if r.ended_at is None or r.ended_at.date() >= since]
    counts = Counter(r.failure_class for r in runs)
    groups = _groups_from_table(data.groups) if data.groups else _config_groups(runs)
    week_rows = _week_over_week(runs, data_day)
    return {
        "day": data.day,
        "data_day": data_day,
        "n_recent_failed": sum(r.attention == 0 for r in recent),
        "generated": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "runs": runs,
        "n_runs": len(runs),
        "n_failed": sum(r.attention == 0 for r in runs),
        "n_hung": sum(r.attention == 1 for r in runs),
        "n_anomalous": sum(r.episodes > 0 for r in runs),
        "n_completed": counts.get("completed", 0),
        "n_stopped": counts.get("interrupted", 0),
        "n_no_outcome": counts.get("no_outcome", 0),
        "goodput": _median(r.goodput for r in runs),
        "attention": (recent or attention)[:MAX_ATTENTION_ROWS],
        "attention_recent": bool(recent),
        "attention_days": ATTENTION_DAYS,
        "attention_shown_of": len(recent or attention),
        "attention_total": len(attention),
        "attention_new": len(recent),
        "counts": sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])),
        "groups": groups,
        "week_rows": week_rows,
        "last_ended": max((r.ended_at for r in runs if r.ended_at is not None), default=None),
        "regressions": [r for r in runs if r.regression],
        "baselines": data.baselines,
        "advice": {cls: advice_entry("failure", cls).first_change for cls in counts if cls != "completed"},
        "failure_chart": charts.failure_bars(dict(counts)),
        "share_chart": charts.share_bars([(g["name"], g["shares"]) for g in groups[:MAX_CHART_GROUPS]]),
        "weekly_chart": charts.weekly_chart(_weeks(runs, data.day)),
    }


def render_fleet_report(warehouse: str | Path, reports_dir: str | Path, day: date) -> Path:
    """Write `reports_dir/fleet/<day>.html` and `fleet/latest.html`; return the dated file."""
    context = fleet_context(load_fleet(warehouse, day))
    context.update(new_signatures=new_signatures(warehouse, context["data_day"]), new_signature_days=NEW_DAYS)
    html = ENV.get_template("fleet.html.j2").render(**context)
    folder = Path(reports_dir) / "fleet"
    path = _write(folder / f"{day.isoformat()}.html", html)
    _write(folder / "latest.html", html)
    return path
