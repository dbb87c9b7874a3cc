"""The rules behind the asset checks, on hand-built warehouses (the checks themselves run through Dagster in
test_asset_checks.py)."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from pipeline import lake
from pipeline.quality import contract_violations, lines_conserved, model_age_days, phase_sums_consistent

DAY_S = 86400.0


def test_lines_conserved_without_its_tables_names_every_run(tmp_path):
    """With `log_lines` missing, every run asked about is reported, not silently passed."""
    lake.write_run_table(tmp_path, "runs", "run-a", pa.table({"n_lines_read": [3]}))
    assert lines_conserved(tmp_path, ["run-a", "run-b"]) == {
        "run-a": {"error": "runs or log_lines missing"}, "run-b": {"error": "runs or log_lines missing"}}


def test_phase_sums_without_share_columns_flag_every_run(tmp_path):
    """A step_phases table with no share_* column cannot be checked: each run is flagged with -1."""
    lake.write_run_table(tmp_path, "step_phases", "run-a", pa.table({"step": [1], "step_time": [2.0]}))
    assert phase_sums_consistent(tmp_path, ["run-a"]) == {"run-a": -1}


def test_contract_is_checked_on_the_runs_asked_about(tmp_path):
    """A run whose partition lacks a column is named even when another run's partition has it."""
    full = {"step": [1], "key": ["a"], "value": [1.0], "source": ["console"], "segment": [0]}
    lake.write_run_table(tmp_path, "step_metrics", "run-a", pa.table({k: v for k, v in full.items() if k != "source"}))
    lake.write_run_table(tmp_path, "step_metrics", "run-b", pa.table(full))
    assert contract_violations(tmp_path, "step_metrics", ["run-a"]) == ["source"]
    assert contract_violations(tmp_path, "step_metrics", ["run-b"]) == []


def test_contract_of_a_table_without_the_runs_asked_about_names_it_missing(tmp_path):
    """No step_health at all, then step_health of run-b only: asked about run-a, the table is missing both times."""
    assert contract_violations(tmp_path, "step_health", ["run-a"]) == ["table step_health missing"]
    lake.write_run_table(tmp_path, "step_health", "run-b", pa.table({"step": [1]}))
    assert contract_violations(tmp_path, "step_health", ["run-a"]) == ["table step_health missing"]


def test_phase_sums_count_the_timed_steps_that_do_not_add_up(tmp_path):
    """run-a: step 1 sums to 1.0, step 2 to 1.5, step 3 to 1.5 but took no time; run-b: 0.5 on its one step.
    Only the timed steps off by more than 0.01 count: run-a 1, run-b 1."""
    lake.write_run_table(tmp_path, "step_phases", "run-a", pa.table({
        "step": [1, 2, 3], "step_time": [2.0, 2.0, 0.0],
        "share_gen": [0.6, 1.0, 1.0], "share_update_actor": [0.4, 0.5, 0.5]}))
    lake.write_run_table(tmp_path, "step_phases", "run-b", pa.table({
        "step": [1], "step_time": [1.0], "share_gen": [0.5], "share_update_actor": [None]},
        schema=pa.schema([("step", pa.int64()), ("step_time", pa.float64()), ("share_gen", pa.float64()),
                          ("share_update_actor", pa.float64())])))
    assert phase_sums_consistent(tmp_path, ["run-a", "run-b"]) == {"run-a": 1, "run-b": 1}
    assert phase_sums_consistent(tmp_path, ["run-b"]) == {"run-b": 1}


def test_model_age_from_the_fit_or_else_the_file(tmp_path):
    """The age is counted from `fitted_at_unix` to the time given; an older model file without it counts
    from the file's modification time."""
    meta = tmp_path / "models" / "anomaly_model.json"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"fitted_at_unix": 1_000_000.0}))
    assert model_age_days(tmp_path, now=1_000_000.0 + 2.5 * DAY_S) == 2.5
    meta.write_text("{}")
    os.utime(meta, (2_000_000.0, 2_000_000.0))
    assert model_age_days(tmp_path, now=2_000_000.0 + DAY_S) == 1.0
    assert model_age_days(tmp_path / "elsewhere") is None
