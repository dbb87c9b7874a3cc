"""The fleet report's template context: the first screen, week over week, config groups, all runs."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from pipeline.report import fleet_charts
from pipeline.report.fleet_data import FAILED_CLASSES, FleetReportData, FleetRun
from pipeline.report.formats import now_with_zone
from pipeline.report.labels import CLASS_LABELS, TRAINING_LABELS

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


def _attention(runs: list[FleetRun], week: dict[str, Any] | None) -> dict[str, Any]:
    """Runs needing attention, failures first; those of the data's last week (or with no time) if any."""
    attention = sorted((r for r in runs if r.attention < 3), key=lambda r: r.attention)
    start = week["week_start"] if week else None
    recent = [r for r in attention if start is None or r.ended_at is None or r.ended_at.date() >= start]
    shown = recent or attention
    return {
        "attention": shown[:MAX_ATTENTION_ROWS],
        "attention_recent": bool(recent),
        "attention_shown_of": len(shown),
        "attention_total": len(attention),
        "attention_new": len(recent),
        "n_recent_failed": sum(r.attention == 0 for r in recent),
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


def _outcomes(runs: list[FleetRun], png: bool, advice: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    counts = Counter(r.failure_class for r in runs)
    trained = Counter(r.training_outcome for r in runs if r.training_outcome)
    return {
        "n_runs": len(runs),
        "n_failed": sum(r.failure_class in FAILED_CLASSES and r.failure_class != "hang" for r in runs),
        "n_hung": sum(r.attention == 1 for r in runs),
        "n_anomalous": sum(r.episodes > 0 for r in runs),
        "n_completed": counts.get("completed", 0),
        "n_stopped": counts.get("interrupted", 0),
        "n_no_outcome": counts.get("no_outcome", 0),
        "counts": sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])),
        "advice": first_changes(runs, advice),
        "training_counts": [(o, TRAINING_LABELS[o], trained[o]) for o in TRAINING_LABELS if trained[o]],
        "failure_chart": fleet_charts.failure_bars(dict(counts), CLASS_LABELS, png),
    }


def _weekly_chart(weeks: list[dict[str, Any]], png: bool):
    shown = weeks[-MAX_CHART_WEEKS:]
    return fleet_charts.weekly_chart([(w["week_end"].strftime("%m-%d"), w["runs"], w["failed"], w["median_step_s"])
                                      for w in shown], png)


def _group_shares(groups: list[dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    phases = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
              "update_weights", "other")
    return [(g["config_group"] or "settings not in the log", {p: g[f"share_{p}"] for p in phases if g.get(f"share_{p}")})
            for g in groups[:MAX_CHART_GROUPS]]


def fleet_context(data: FleetReportData, png: bool = False) -> dict[str, Any]:
    """The template context of the fleet report (charts drawn here: SVG for the page, PNG for a mail)."""
    runs = _newest_first(data.runs)
    week = data.weeks[-1] if data.weeks else None
    data_day = week["week_end"] if week else data.day
    return {
        "day": data.day,
        "data_day": data_day,
        "week_start": week["week_start"] if week else data_day - timedelta(days=ATTENTION_DAYS - 1),
        "generated": now_with_zone(),
        "runs": runs,
        **_attention(runs, week),
        **_outcomes(runs, png, data.advice),
        "attention_days": ATTENTION_DAYS,
        "goodput": (week or {}).get("median_goodput"),
        "groups": data.groups,
        "n_weeks": len(data.weeks),
        "week_rows": week_rows(week),
        "last_ended": max((r.ended_at for r in runs if r.ended_at is not None), default=None),
        "regressions": [r for r in runs if r.regression],
        "not_analysed": [r for r in runs if r.analysis_error],
        "share_chart": fleet_charts.share_bars(_group_shares(data.groups), png),
        "weekly_chart": _weekly_chart(data.weeks, png),
    }
