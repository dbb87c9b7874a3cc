"""The fleet report's template context: the first screen, week over week, config groups, all runs."""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timedelta
from statistics import median
from typing import Any

from pipeline.report import fleet_charts
from pipeline.report.fleet_data import FINE, FleetReportData, FleetRun
from pipeline.report.formats import now_with_zone
from pipeline.report.labels import CLASS_LABELS, TRAINING_LABELS
from pipeline.vocabulary import STEP_PHASES

MAX_ATTENTION_ROWS = 100
MAX_CHART_GROUPS = 15
MAX_CHART_WEEKS = 52
ATTENTION_DAYS = 7
# (fleet_weekly column, label, how it is written, whether a rise is worse)
WEEK_MEASURES = (
    ("runs", "Runs ended", "num", None),
    ("failed", "Failed or hung", "num", True),
    ("failure_rate", "Failure rate", "pct", True),
    ("median_step_s", "Median step time (s)", "num", True),
    ("median_goodput", "Median goodput", "pct", False),
)


def week_rows(week: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The last week of fleet_weekly against the 7 days before it, one row per measure."""
    out = []
    for key, label, kind, worse_if_up in WEEK_MEASURES:
        this, last = (week or {}).get(key), (week or {}).get(f"prev_{key}")
        trend = ""
        if this is not None and last is not None and this != last and worse_if_up is not None:
            trend = "worse" if (this > last) == worse_if_up else "better"
        out.append({"label": label, "this": this, "last": last, "kind": kind, "trend": trend})
    return out


def _newest_first(runs: list[FleetRun]) -> list[FleetRun]:
    return sorted(runs, key=lambda r: (r.ended_at is None, -(r.ended_at or datetime.min).timestamp()
                                       if r.ended_at else 0, r.run_id))


def _in_window(run: FleetRun, start: date, day: date) -> bool:
    """Whether the first screen counts the run: it ended in the window (or has no end time), or the warehouse
    first took it in during the 7 days up to the report's day, whatever the dates in its log."""
    return (run.ended_at is None or run.ended_at.date() >= start
            or (run.analysed_at is not None and run.analysed_at.date() > day - timedelta(days=ATTENTION_DAYS)))


def _first_screen(runs: list[FleetRun], start: date, day: date) -> dict[str, Any]:
    """The banner and cards: one window of runs, counted so the outcomes add up to its runs."""
    window = [r for r in runs if _in_window(r, start, day)]
    in_window = {r.run_id for r in window}
    attention = sorted((r for r in runs if r.attention < FINE), key=lambda r: r.attention)
    recent = [r for r in attention if r.run_id in in_window]
    shown = recent or attention
    # a run whose training failed counts among the failed, not under how its log ended: the outcomes add up
    counts = Counter(r.failure_class for r in window if r.attention != 0)
    goodputs = [r.goodput for r in window if r.goodput is not None]
    return {
        "attention": shown[:MAX_ATTENTION_ROWS],
        "attention_recent": bool(recent),
        "attention_shown_of": len(shown),
        "attention_total": len(attention),
        "attention_new": len(recent),
        "n_recent_failed": sum(r.attention == 0 for r in recent),
        "n_window": len(window),
        "n_new": sum(r.analysed_at is not None and r.analysed_at.date() > day - timedelta(days=ATTENTION_DAYS)
                     for r in window),
        "n_failed": sum(r.attention == 0 for r in window),
        "n_hung": sum(r.attention == 1 for r in window),
        "n_anomalous": sum(r.episodes > 0 for r in window),
        "n_completed": counts.get("completed", 0),
        "n_stopped": counts.get("interrupted", 0),
        "n_no_outcome": counts.get("no_outcome", 0),
        "goodput": median(goodputs) if goodputs else None,
        "window_training": [(label, n) for o, label in TRAINING_LABELS.items()
                            if (n := sum(r.training_outcome == o for r in window))],
    }


def _direction(row: dict[str, Any]) -> str:
    """Which way a run_advice row moves its setting: lower or raise for a number, else the value to set."""
    try:
        current, suggested = float(row["current_value"]), float(row["suggested_value"])
    except (TypeError, ValueError):
        word = str(row["suggested_value"] or "").split(" ", 1)[0].lower()
        return word if word in ("lower", "raise") else str(row["suggested_value"])
    if current <= 0:  # verl's "off" (-1, 0): the value that turns it on says more than "raise"
        return str(row["suggested_value"])
    return "lower" if suggested < current else "raise"


def first_changes(runs: list[FleetRun], advice: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per failure class, the change most of its runs got from run_advice (a setting and its direction), with the
    runs it applies to; a class whose runs got no change has none."""
    out = {}
    by_class: dict[str, list[str]] = {}
    for r in runs:
        by_class.setdefault(r.failure_class, []).append(r.run_id)
    for cls, ids in by_class.items():
        got: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
        for rid in ids:
            for row in advice.get(rid, []):
                key = (row["kind"], row["setting"], _direction(row))
                if all(rid != seen for _, seen in got.get(key, [])):
                    got.setdefault(key, []).append((row["rank"], rid))
        if got:
            # most runs first, then the change those runs rank higher
            (kind, setting, direction), applied = min(
                got.items(), key=lambda kv: (-len(kv[1]), sum(rank for rank, _ in kv[1]) / len(kv[1]), kv[0]))
            out[cls] = {"kind": kind, "setting": setting, "direction": direction,
                        "runs": sorted(rid for _, rid in applied), "of": len(ids)}
    return out


def _hours_lost(runs: list[FleetRun]) -> tuple[float, int, dict[str, float]]:
    """The runs' GPU-hours lost, how many runs' are unknown, and the hours lost on each other device."""
    others: dict[str, float] = {}
    for r in runs:
        if r.gpu_hours_lost is not None and r.accelerator != "GPU":
            others[r.accelerator] = others.get(r.accelerator, 0.0) + r.gpu_hours_lost
    return (sum(r.gpu_hours_lost for r in runs if r.gpu_hours_lost is not None and r.accelerator == "GPU"),
            sum(r.gpu_hours_lost is None for r in runs), others)


def _outcomes(runs: list[FleetRun], png: bool, advice: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    counts = Counter(r.failure_class for r in runs)
    trained = Counter(r.training_outcome for r in runs if r.training_outcome)
    return {
        "n_runs": len(runs),
        "counts": sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])),
        # per class: GPU-hours lost summed over the runs whose log says them, how many runs do not, and the
        # hours of other devices (TPU, NPU) apart: a TPU-hour is no GPU-hour
        "gpu_hours_lost": {cls: _hours_lost([r for r in runs if r.failure_class == cls]) for cls in counts},
        "advice": first_changes(runs, advice),
        "training_counts": [(o, TRAINING_LABELS[o], trained[o]) for o in TRAINING_LABELS if trained[o]],
        "failure_chart": fleet_charts.failure_bars(dict(counts), CLASS_LABELS, png),
    }


def _weekly_chart(weeks: list[dict[str, Any]], png: bool) -> dict[str, Any]:
    """The weekly chart (weeks named by their last day, year included) and how many runs it counts."""
    shown = weeks[-MAX_CHART_WEEKS:]
    return {
        "weekly_chart": fleet_charts.weekly_chart(
            [(w["week_end"].isoformat(), w["runs"], w["failed"], w["median_step_s"]) for w in shown], png),
        "weekly_covered": sum(w["runs"] or 0 for w in shown),
        "weekly_weeks": len(shown),
    }


def _group_shares(groups: list[dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    phases = (*STEP_PHASES, "other")
    return [(g["config_group"] or "settings not in the log", {p: g[f"share_{p}"] for p in phases if g.get(f"share_{p}")})
            for g in groups[:MAX_CHART_GROUPS]]


def fleet_context(data: FleetReportData, png: bool = False) -> dict[str, Any]:
    """The template context of the fleet report (charts drawn here: SVG for the page, PNG for a mail)."""
    runs = _newest_first(data.runs)
    week = data.weeks[-1] if data.weeks else None
    data_day = week["week_end"] if week else data.day
    week_start = week["week_start"] if week else data_day - timedelta(days=ATTENTION_DAYS - 1)
    return {
        "day": data.day,
        "data_day": data_day,
        "week_start": week_start,
        "generated": now_with_zone(),
        "runs": runs,
        **_first_screen(runs, week_start, data.day),
        **_outcomes(runs, png, data.advice),
        "attention_days": ATTENTION_DAYS,
        "groups": data.groups,
        "n_weeks": len(data.weeks),
        "week_rows": week_rows(week),
        "last_ended": max((r.ended_at for r in runs if r.ended_at is not None), default=None),
        "regressions": [r for r in runs if r.regression],
        "not_analysed": [r for r in runs if r.analysis_error],
        "share_chart": fleet_charts.share_bars(_group_shares(data.groups), png),
        **_weekly_chart(data.weeks, png),
    }
