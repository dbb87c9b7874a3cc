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
