"""Every expected outcome in ../shared/real-logs/LABELS.jsonl, against the diagnosis of the real logs.

The labels come from careful readers of the logs, not from this program: each line names the class,
stop reason, last step, failure phase and a verbatim piece of the causal line of one real verl log.
"""

from __future__ import annotations

import json
import re

import duckdb
import pytest
from conftest import SHARED


def _labels() -> list[dict]:
    path = SHARED / "real-logs" / "LABELS.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", re.sub(r"\.(log|txt|out)$", "", name))


LABELS = _labels()


@pytest.fixture(scope="module")
def summary(analyzed_real_logs) -> dict[str, dict]:
    """run_summary of the analysed real logs, by run id."""
    con = duckdb.connect(str(analyzed_real_logs.warehouse / "warehouse.duckdb"), read_only=True)
    try:
        rel = con.sql("select * from run_summary")
        rows = [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
        return {row["run_id"]: row for row in rows}
    finally:
        con.close()


@pytest.fixture(scope="module")
def flagged(analyzed_real_logs) -> dict[str, list[int]]:
    """Anomalous steps per run of the analysed real logs."""
    con = duckdb.connect(str(analyzed_real_logs.warehouse / "warehouse.duckdb"), read_only=True)
    try:
        rows = con.execute("select run_id, list(step order by step) from step_anomalies where is_anomaly "
                           "group by all").fetchall()
        return dict(rows)
    finally:
        con.close()


def test_labels_are_present(shared_dir) -> None:
    """The shared labels exist and cover every shared real log."""
    logs = {p.name for p in (shared_dir / "real-logs").glob("*.log")}
    assert LABELS, "LABELS.jsonl is empty"
    assert logs == {lab["file"] for lab in LABELS}


@pytest.mark.parametrize("label", LABELS, ids=[lab["file"][:40] for lab in LABELS])
def test_outcome_matches_label(label: dict, summary: dict[str, dict]) -> None:
    """Class, stop reason, last step, failure phase and causal line, as the label says."""
    got = summary[_run_id(label["file"])]
    assert got["failure_class"] == label["failure_class"]
    assert got["stop_reason"] == label["stop_reason"]
    assert got["last_step"] == label["last_step"]
    assert got["failure_phase"] == label["failure_phase"]
    if label["root_cause_contains"]:
        assert label["root_cause_contains"].lower() in (got["root_cause_text"] or "").lower()
    if label["failure_class"] == "hang":
        assert got["hang_reason"], "a hang names its evidence"
    else:
        assert got["hang_reason"] is None


@pytest.mark.parametrize("label", LABELS, ids=[lab["file"][:40] for lab in LABELS])
def test_anomaly_flags_match_health(label: dict, flagged: dict[str, list[int]]) -> None:
    """Healthy real runs raise no anomaly flag; a run whose curves show a pathology raises some."""
    steps = flagged.get(_run_id(label["file"]), [])
    if label["healthy_metrics"]:
        assert steps == []
    else:
        assert steps, label["healthy_metrics_reason"]


@pytest.mark.parametrize("label", LABELS, ids=[lab["file"][:40] for lab in LABELS])
def test_training_outcome_matches_health(label: dict, summary: dict[str, dict]) -> None:
    """A run whose label says its curves collapsed reads `collapsed` from the step the label names (its
    "(step N)"), whatever the log's end, and its goodput stops there; a healthy run has no training outcome."""
    got = summary[_run_id(label["file"])]
    reason = label.get("healthy_metrics_reason") or ""
    if label["healthy_metrics"]:
        assert got["training_outcome"] is None
    elif "collapse" in reason:
        assert got["training_outcome"] == "collapsed"
        assert got["training_outcome_step"] == int(re.search(r"\(step (\d+)\)", reason).group(1))
        assert got["goodput"] < 1


def test_stall_duration_from_the_progress_bar(summary: dict[str, dict]) -> None:
    """The stuck-compilation run: its bar printed 0/58 at 00:00 and again at 07:16, so 436 s passed."""
    got = summary["12_tpu_xla_port_stuck_compiling_step0"]
    assert got["hang_duration_s"] == pytest.approx(7 * 60 + 16)
    assert "7.3 min" in got["hang_reason"]


def test_a_collapsed_run_says_so_in_its_banner(analyzed_real_logs) -> None:
    """Each log whose label says its curves collapsed: the run report's banner leads with it, though the log
    just ends with no error."""
    from report_fixtures import parse_html

    collapsed = [_run_id(lab["file"]) for lab in LABELS if "collapse" in (lab.get("healthy_metrics_reason") or "")]
    assert collapsed
    for rid in collapsed:
        doc = parse_html((analyzed_real_logs.reports / "runs" / f"{rid}.html").read_text(encoding="utf-8"))
        banner = doc.find("section", id_="verdict")
        assert banner.attrs["data-training-outcome"] == "collapsed"
        assert banner.find("p", cls="headline").text().startswith("Training collapsed")
