"""Asset checks through Dagster: they pass on good data, fail or warn on partitions built to violate
them, and one bad run stops no other."""

from __future__ import annotations

import json
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
from dagster import AssetCheckSeverity, AssetSelection, DagsterInstance, materialize
from operate_support import fail_ingest_of, write_run

from pipeline import lake, tables
from pipeline.defs.assets import derive as derive_assets
from pipeline.defs.assets.detect import anomaly_model_fresh
from pipeline.defs.definitions import build_definitions
from pipeline.defs.partitions import RUN_PARTITIONS_NAME, partition_tags
from pipeline.incremental import REINGEST_TAG
from pipeline.lake import connect, run_partition_dir
from pipeline.quality import contract_violations, lines_conserved

INGEST_AND_DERIVE = list(tables.with_inputs("run_summary", "config_findings"))


def _materialize(tmp_path, run_ids, selection, **extra_tags):
    defs = build_definitions(tmp_path / "archive", tmp_path / "wh", tmp_path / "reports", quiet_period_s=0)
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, run_ids)
    tags = partition_tags(run_ids)
    return materialize(list(defs.assets), instance=instance, resources=defs.resources, selection=selection,
                       tags={**tags, **extra_tags}, raise_on_error=False)


def _checks(result) -> dict[tuple[str, str], bool]:
    return {(e.asset_key.to_user_string(), e.check_name): e.passed for e in result.get_asset_check_evaluations()}


def _evaluation(result, asset: str, check: str):
    [found] = [e for e in result.get_asset_check_evaluations()
               if (e.asset_key.to_user_string(), e.check_name) == (asset, check)]
    return found


def test_steps_contiguous_warns_on_a_gap(tmp_path):
    """A console log that jumps from step 3 to step 7 is ingested with a warning that names the gap."""
    write_run(tmp_path / "archive", "gappy", steps=[1, 2, 3, 7, 8])
    result = _materialize(tmp_path, ["gappy"], ["runs", "log_lines", "step_metrics"])
    assert result.success
    check = _evaluation(result, "step_metrics", "steps_contiguous")
    assert (check.passed, check.severity) == (False, AssetCheckSeverity.WARN)
    assert check.metadata["gaps"].value == {"gappy": [[3, 7]]}


def test_phase_sums_warn_when_shares_do_not_add_up(tmp_path, monkeypatch):
    """A step_phases partition whose shares sum to 1.5 on every step (a derivation bug, injected after the
    SQL) makes the check warn, with the run and its count of bad steps."""
    write_run(tmp_path / "archive", "run-a", steps=5)
    real_derive = derive_assets.derive_run_table

    def overcounting(warehouse, table, run_ids):
        rows = real_derive(warehouse, table, run_ids)
        if table == "step_phases":
            part = lake.run_partition_dir(warehouse, table, "run-a") / "part-0.parquet"
            data = pq.read_table(part)
            share = data.column_names.index("share_gen")
            data = data.set_column(share, "share_gen", pc.add(pc.fill_null(data.column(share), 0.0), 0.5))
            lake.write_run_table(warehouse, table, "run-a", data)
        return rows

    monkeypatch.setattr(derive_assets, "derive_run_table", overcounting)
    result = _materialize(tmp_path, ["run-a"], ["runs", "log_lines", "step_metrics", "step_phases"])
    check = _evaluation(result, "step_phases", "phase_sums_consistent")
    assert (check.passed, check.severity) == (False, AssetCheckSeverity.WARN)
    assert check.metadata["runs_with_bad_sums"].value == {"run-a": 5}


def test_model_freshness_warns_on_a_stale_or_missing_model(tmp_path):
    """Run alone through Dagster, the check warns with no model and with one fitted 30 days ago, and
    passes with one fitted an hour ago."""
    defs = build_definitions(tmp_path / "archive", tmp_path / "wh", tmp_path / "reports", quiet_period_s=0)
    meta = tmp_path / "wh" / "models" / "anomaly_model.json"

    def check():
        result = materialize([*defs.assets, anomaly_model_fresh], resources=defs.resources,
                             selection=AssetSelection.checks(anomaly_model_fresh),
                             instance=DagsterInstance.ephemeral())
        [evaluation] = result.get_asset_check_evaluations()
        assert evaluation.severity == AssetCheckSeverity.WARN
        return evaluation.passed, evaluation.metadata["age_days"].value

    assert check() == (False, -1.0)
    meta.parent.mkdir(parents=True)
    for days_ago, fresh in ((30, False), (1 / 24, True)):
        meta.write_text(json.dumps({"fitted_at_unix": time.time() - days_ago * 86400}))
        passed, age = check()
        assert passed is fresh and abs(age - days_ago) < 0.01, (days_ago, passed, age)


def test_checks_pass_on_good_runs(tmp_path):
    for rid in ("run-a", "run-b"):
        write_run(tmp_path / "archive", rid, steps=5)
    result = _materialize(tmp_path, ["run-a", "run-b"], INGEST_AND_DERIVE)
    assert result.success
    checks = _checks(result)
    assert checks[("log_lines", "lines_conserved")] and checks[("step_metrics", "steps_contiguous")]
    for table in INGEST_AND_DERIVE:
        assert checks[(table, "matches_contract")], table
    assert checks[("step_phases", "phase_sums_consistent")]


def test_lines_conserved_fails_when_a_partition_loses_lines(tmp_path):
    write_run(tmp_path / "archive", "run-a", steps=5)
    assert _materialize(tmp_path, ["run-a"], ["runs", "log_lines", "step_metrics"]).success
    wh = tmp_path / "wh"
    [part] = run_partition_dir(wh, "log_lines", "run-a").glob("*.parquet")
    table = pq.read_table(part)
    pq.write_table(table.slice(0, table.num_rows - 2), part)
    assert lines_conserved(wh, ["run-a"]) == {"run-a": {"read": 5, "kept": 3}}
    # the unchanged run is not ingested again, so the blocking check sees the damage and fails
    result = _materialize(tmp_path, ["run-a"], ["runs", "log_lines", "step_metrics"])
    assert _checks(result)[("log_lines", "lines_conserved")] is False


def test_contract_check_names_the_missing_column(tmp_path):
    write_run(tmp_path / "archive", "run-a", steps=3)
    assert _materialize(tmp_path, ["run-a"], ["runs", "log_lines", "step_metrics"]).success
    wh = tmp_path / "wh"
    [part] = run_partition_dir(wh, "step_metrics", "run-a").glob("*.parquet")
    pq.write_table(pq.read_table(part).drop_columns(["source"]), part)
    assert contract_violations(wh, "step_metrics", ["run-a"]) == ["source"]
    result = _materialize(tmp_path, ["run-a"], ["runs", "log_lines", "step_metrics", "step_phases"])
    assert _checks(result)[("step_metrics", "matches_contract")] is False
    # blocking: what reads step_metrics does not run on the broken table
    assert "step_phases" not in {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()}


def test_a_run_whose_ingest_fails_stops_no_other(tmp_path, monkeypatch):
    for rid in ("run-a", "run-b", "run-c"):
        write_run(tmp_path / "archive", rid, steps=4)
    fail_ingest_of(monkeypatch, "run-b")
    result = _materialize(tmp_path, ["run-a", "run-b", "run-c"], INGEST_AND_DERIVE)
    assert result.success
    ingest = next(m for m in result.get_asset_materialization_events() if m.asset_key.to_user_string() == "runs")
    problems = ingest.materialization.metadata["problems"].value
    assert list(problems) == ["run-b"] and "ingest failed" in problems["run-b"][0]
    summary = {r: (step, error) for r, step, error in connect(tmp_path / "wh").execute(
        "select run_id, last_step, analysis_error from run_summary").fetchall()}
    assert {r: summary[r][0] for r in ("run-a", "run-c")} == {"run-a": 4, "run-c": 4}
    # the run whose ingest failed is in the summary, said not to be analysed, with why
    assert summary["run-a"][1] is None and summary["run-c"][1] is None
    assert summary["run-b"][1].startswith("could not be analysed: ingest failed: ")


def test_unchanged_runs_are_not_ingested_again(tmp_path):
    write_run(tmp_path / "archive", "run-a", steps=3)
    ingest = ["runs", "log_lines", "step_metrics"]

    def skipped(result) -> int:
        event = next(m for m in result.get_asset_materialization_events() if m.asset_key.to_user_string() == "runs")
        return event.materialization.metadata["unchanged_runs_skipped"].value

    assert skipped(_materialize(tmp_path, ["run-a"], ingest)) == 0
    [part] = run_partition_dir(tmp_path / "wh", "log_lines", "run-a").glob("*.parquet")
    written = part.stat().st_mtime_ns
    assert skipped(_materialize(tmp_path, ["run-a"], ingest)) == 1
    assert part.stat().st_mtime_ns == written
    assert skipped(_materialize(tmp_path, ["run-a"], ingest, **{REINGEST_TAG: "true"})) == 0
    write_run(tmp_path / "archive", "run-a", steps=4)
    assert skipped(_materialize(tmp_path, ["run-a"], ingest)) == 0
    assert connect(tmp_path / "wh").execute("select max(step) from step_metrics").fetchone()[0] == 4


def test_archive_resource_limits_bound_a_decompression_bomb(tmp_path, monkeypatch):
    import gzip

    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "bomb.log.gz").write_bytes(gzip.compress(b"step:1 - a:1\n" * (2**20)))
    monkeypatch.setenv("VERL_HEALTH_MAX_RUN_GB", str(2**20 / 2**30))
    result = _materialize(tmp_path, ["bomb"], ["runs", "log_lines", "step_metrics"])
    assert result.success
    [run] = connect(tmp_path / "wh").execute("select n_bytes, problems from runs").fetchall()
    assert run[0] <= 2**20 and any("decompression bomb" in p for p in run[1])


def test_the_ingest_metadata_names_the_first_20_runs_with_problems_and_counts_the_rest():
    """25 runs with problems: the metadata copied onto each run's materialisation holds runs 00-19 by id and a
    line saying 5 more are in runs.problems; 3 runs: all of them, nothing added."""
    from pipeline.defs.assets.ingest import _first_problems

    many = {f"run-{i:02d}": [f"problem of run {i}"] for i in reversed(range(25))}
    kept = _first_problems(many)
    assert list(kept) == [f"run-{i:02d}" for i in range(20)] + ["..."]
    assert kept["run-07"] == ["problem of run 7"]
    assert kept["..."] == ["5 more runs with problems: see runs.problems"]
    few = {"run-b": ["x"], "run-a": ["y"], "run-c": ["z"]}
    assert _first_problems(few) == {"run-a": ["y"], "run-b": ["x"], "run-c": ["z"]}
