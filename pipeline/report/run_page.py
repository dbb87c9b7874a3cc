"""The run report's template context: its tables and charts, from what run_data read."""

from __future__ import annotations

import datetime
from dataclasses import fields
from typing import Any

import numpy as np

from pipeline.report import charts
from pipeline.report.formats import fmt_pct, now_with_zone
from pipeline.report.run_data import RunReportData
from pipeline.report.verdict import verdict
from pipeline.vocabulary import AFTER_STEP_PHASES, STEP_PHASES

BASELINE_SHARES = ("gen", "old_log_prob", "update_actor", "other")


def phase_table(data: RunReportData) -> list[dict[str, Any]]:
    """Per phase: median, 95th percentile and total seconds, and its share of the step (run_summary)."""
    out = []
    for name in (*STEP_PHASES, "other_time", *AFTER_STEP_PHASES):
        v = data.phases.get(name)
        if v is None or not np.isfinite(v).any():
            continue
        label = "other" if name == "other_time" else name
        in_step = name not in AFTER_STEP_PHASES
        # order statistics of the logged steps: what nanmedian and nanpercentile give, without their overhead
        logged = v[~np.isnan(v)]
        out.append({"phase": label, "median": float(np.median(logged)), "p95": float(np.percentile(logged, 95)),
                    "total": float(np.nansum(v)), "share": data.summary.get(f"share_{label}") if in_step else None,
                    "in_step": in_step})
    return out


def health_panels(h: dict[str, np.ndarray]) -> list[charts.Panel]:
    """The training-health chart's panels, each with the curves this run logged."""
    def pick(*names):
        return [(n, h[n]) for n in names if n in h and h[n].dtype.kind == "f" and np.isfinite(h[n]).any()]

    return [
        charts.Panel("Reward", pick("score_mean", "reward_mean", "val_core_mean"), distinct=True),
        charts.Panel("KL", pick("ppo_kl", "kl_loss", "reward_kl"), distinct=True),
        charts.Panel("Entropy", pick("entropy")),
        charts.Panel("Grad norm", pick("grad_norm", "critic_grad_norm"), log=True),
        charts.Panel("Response length & clip ratio", pick("response_length_mean"), right=pick("response_clip_ratio")),
        charts.Panel("Memory (GB)", pick("mem_allocated_gb", "mem_reserved_gb", "cpu_memory_used_gb", "mem_total_gb")),
    ]


def baseline_rows(b: dict[str, Any]) -> list[dict[str, Any]]:
    """This run against earlier runs of its experiment and of its config group, as run_baselines has it
    (a scope with no earlier run is left out)."""
    if "exp_step_ratio" not in b:
        return []
    return [row for row in _scopes(b) if row["prior"]]


def _scopes(b: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"label": label, "name": b.get("experiment_name") if scope == "exp" else b.get("config_group"),
         "prior": b.get(f"{scope}_prior_runs"), "median": b.get(f"{scope}_median_step_s"),
         "ratio": b.get(f"{scope}_step_ratio"),
         "shares": [(p, b.get(f"{scope}_{p}_share_ratio")) for p in BASELINE_SHARES]}
        for scope, label in (("exp", "same experiment"), ("group", "same config group"))
    ]


def _nan_steps(h: dict[str, np.ndarray]) -> np.ndarray:
    """The steps whose logged values include a NaN/inf (step_health.has_nan)."""
    if "has_nan" not in h or "step" not in h:
        return np.array([])
    return h["step"][h["has_nan"] > 0]


def _epoch(ts: Any) -> float | None:
    """A log clock (the runs table's naive UTC timestamp) as seconds, like step_phases' step_end_s."""
    return ts.replace(tzinfo=datetime.UTC).timestamp() if isinstance(ts, datetime.datetime) else None


def _charts(data: RunReportData) -> dict[str, Any]:
    steps = data.phases.get("step", np.array([]))
    phase_series = {p: data.phases[p] for p in STEP_PHASES if p in data.phases}
    if "other_time" in data.phases:
        phase_series["other"] = data.phases["other_time"]
    return {
        "phase_chart": charts.phase_chart(steps, phase_series),
        "clock_chart": charts.clock_chart(steps, data.phases.get("step_end_s", np.full(len(steps), np.nan)),
                                          _epoch(data.summary.get("last_ts"))),
        "health_chart": charts.health_chart(
            data.health.get("step", np.array([])), health_panels(data.health),
            [(e.first_step, e.last_step, e.anomaly_class) for e in data.episodes], data.anomaly_steps,
            _nan_steps(data.health)),
    }


def run_context(data: RunReportData) -> dict[str, Any]:
    """The template context of a run report (charts drawn here)."""
    s, b = data.summary, data.baseline
    return {
        "run_id": data.run_id,
        "generated": now_with_zone(),
        "s": s,
        "verdict": verdict(s, len(data.episodes)),
        **{f.name: getattr(data, f.name) for f in fields(data)},
        "completeness": {**data.completeness, "parse_completeness": fmt_pct(data.completeness.get("parse_completeness"), 1)},
        "phase_table": phase_table(data),
        "device_label": data.setup.get("accelerator") or "GPU",
        "bottleneck": s.get("bottleneck_phase"),
        "median_step": s.get("median_step_s"),
        "comparison": {"base": b["exp_median_step_s"], "ratio": b.get("exp_step_ratio"), "n": b["exp_prior_runs"]}
        if b.get("exp_prior_runs") and b.get("exp_median_step_s") else None,
        "baseline_rows": baseline_rows(b),
        "baseline_shares": BASELINE_SHARES,
        "n_anomalous_steps": len(data.anomaly_steps),
        "n_steps": len(data.health.get("step", data.phases.get("step", []))),
        **_charts(data),
    }
