"""`analyze --include/--since/--until` as the config of a Dagster job: analyze_archive_job."""

from __future__ import annotations

import os
import time

import pytest
from dagster import DagsterInstance

from pipeline.defs.definitions import build_definitions

DAYS = {"grpo-a": "2026-11-20", "grpo-b": "2026-11-26", "ppo-c": "2026-11-27"}


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archive"
    root.mkdir()
    for rid, day in DAYS.items():
        path = root / f"{rid}.log"
        path.write_text("".join(f"step:{s} - actor/pg_loss:0.{s} - timing_s/gen:3{s}.0 - timing_s/step:5{s}.0\n"
                                for s in range(1, 6)))
        stamp = time.mktime(time.strptime(f"{day} 12", "%Y-%m-%d %H"))
        os.utime(path, (stamp, stamp))
    return root


def _analysed(tmp_path, archive, config: dict) -> list[str]:
    defs = build_definitions(archive, tmp_path / "wh", tmp_path / "rep", quiet_period_s=0)
    job = defs.resolve_job_def("analyze_archive_job")
    run_config = {"ops": {"analyze_selected_runs": {"config": config}}}
    result = job.execute_in_process(run_config=run_config, instance=DagsterInstance.ephemeral())
    assert result.success
    return sorted(result.output_for_node("analyze_selected_runs"))


def test_the_job_analyses_only_the_selected_runs(tmp_path, archive):
    assert _analysed(tmp_path, archive, {"include": "grpo-*", "since": "2026-11-25"}) == ["grpo-b"]
    assert sorted(p.name for p in (tmp_path / "wh" / "runs").iterdir() if p.name.startswith("run_id=")) == [
        "run_id=grpo-b"]


def test_until_bounds_the_days_of_last_activity(tmp_path, archive):
    assert _analysed(tmp_path, archive, {"until": "2026-11-26"}) == ["grpo-a", "grpo-b"]
