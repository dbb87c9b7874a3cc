"""Derive on the real verl logs in ../shared/real-logs: events and config findings a careful reader sees.

The diagnosis of each log (class, step, phase, causal line) is asserted against the shared labels in
test_real_log_labels.py; this module checks what those labels do not cover.
"""

from __future__ import annotations

import pytest

from pipeline.lake import connect


@pytest.fixture(scope="module")
def con(analyzed_real_logs):
    """The real logs' warehouse, analysed once per session."""
    con = connect(analyzed_real_logs.warehouse)
    yield con
    con.close()


def test_benign_shutdown_notice_is_an_event_not_the_ending(con):
    """Log 27 ends with raylet's 'A worker died ... SIGTERM' after its final validation: still completed."""
    assert con.execute("select failure_class from run_summary where run_id like '27_%'").fetchone()[0] == "completed"
    n = con.execute("select count(*) from run_events where run_id like '27_%' and event_class = 'worker_died'"
                    ).fetchone()[0]
    assert n == 1


def test_config_findings_on_real_logs(con):
    found = set(con.execute("select run_id, finding from config_findings").fetchall())
    stems = {(run_id[:3], finding) for run_id, finding in found}
    assert ("10_", "kv_cache_too_small") in stems
    assert ("28_", "disk_nearly_full") in stems
    assert ("03_", "train_batch_not_divisible_by_mini_batch") in stems
    # Megatron's expert_tensor_parallel_size is the trainer's, not the rollout's tensor parallel size
    assert ("08_", "rollout_tp_mismatch") not in stems
