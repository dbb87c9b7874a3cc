"""The finished-run sensor against a temporary archive: new, unfinished, changed and removed runs."""

import json
import shutil
from collections import Counter
from types import SimpleNamespace

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterInstance,
    DeleteDynamicPartitionsRequest,
    SkipReason,
    build_sensor_context,
)
from operate_support import set_age, write_run

from pipeline.defs.analysis import analyze_archive
from pipeline.defs.definitions import build_definitions
from pipeline.defs.jobs import FORKED_STEPS
from pipeline.defs.partitions import RANGE_END_TAG, RANGE_START_TAG, RUN_PARTITIONS_NAME
from pipeline.defs.resources import ArchiveResource
from pipeline.defs.sensors import archive_cursor, finished_run_sensor, plan_archive_changes
from pipeline.lake import connect
from pipeline.tables import fleet_tables


def _entry(run_id, size=10, mtime=1000.0, finished=True):
    return SimpleNamespace(run_id=run_id, size=size, mtime=mtime, finished=finished)


def test_plan_new_changed_removed_and_unfinished():
    seen = {"kept": "10:1000", "grown": "10:1000", "gone": "10:1000", "reopened": "10:1000"}
    entries = [
        _entry("kept"),
        _entry("grown", size=20, mtime=1100.0),
        _entry("fresh"),
        _entry("writing", finished=False),
        _entry("reopened", size=30, finished=False),
    ]
    new, changed, removed, cursor = plan_archive_changes(entries, seen)
    assert (new, changed, removed) == (["fresh"], ["grown"], ["gone"])
    # An unfinished run is not recorded; one seen before keeps its old fingerprint until it settles.
    assert cursor == {"kept": "10:1000", "grown": "20:1100", "fresh": "10:1000", "reopened": "10:1000"}


def test_plan_is_idempotent():
    entries = [_entry("a"), _entry("b", size=5)]
    _, _, _, cursor = plan_archive_changes(entries, {})
    assert plan_archive_changes(entries, cursor) == ([], [], [], cursor)


def _evaluate(archive, cursor, instance, quiet_period_s=600):
    context = build_sensor_context(
        cursor=cursor,
        resources={"archive": ArchiveResource(root=str(archive), quiet_period_s=quiet_period_s)},
        instance=instance,
    )
    return finished_run_sensor(context), context


def _apply(instance, result):
    """What the daemon does with a tick's partition requests before it launches the tick's runs."""
    for request in result.dynamic_partitions_requests:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)


def _selected(instance, request) -> list[str]:
    """The run partitions a run request selects, by its tags, in the instance's partition order."""
    if "dagster/partition" in request.tags:
        return [request.tags["dagster/partition"]]
    keys = instance.get_dynamic_partitions(RUN_PARTITIONS_NAME)
    first, last = request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]
    return keys[keys.index(first):keys.index(last) + 1]


def test_sensor_over_an_archive_lifecycle(tmp_path):
    archive = tmp_path / "archive"
    write_run(archive, "grpo-a")
    write_run(archive, "ppo-b")
    write_run(archive, "dapo-live", age_s=5)  # still being written: inside the quiet period
    instance = DagsterInstance.ephemeral()

    # 1. First tick: the two finished runs are new, in one run over their range; the live one waits.
    result, _ = _evaluate(archive, None, instance)
    [add] = result.dynamic_partitions_requests
    assert isinstance(add, AddDynamicPartitionsRequest)
    assert add.partitions_def_name == RUN_PARTITIONS_NAME and sorted(add.partition_keys) == ["grpo-a", "ppo-b"]
    _apply(instance, result)
    [request] = result.run_requests
    assert sorted(_selected(instance, request)) == ["grpo-a", "ppo-b"]
    assert request.tags["verl-health/reason"] == "new" and request.tags["verl-health/runs"] == "2"
    assert request.run_config == FORKED_STEPS  # the job's own config, which a range run does not get by itself
    cursor = json.loads(result.cursor)
    assert set(cursor) == {"grpo-a", "ppo-b"}

    # 2. Nothing changed: skip, cursor kept.
    result2, context2 = _evaluate(archive, result.cursor, instance)
    assert isinstance(result2, SkipReason)
    assert json.loads(context2.cursor) == cursor

    # 3. The live run settles, grpo-a is appended to (and settles), ppo-b is deleted.
    set_age(archive / "dapo-live", 3600)
    with (archive / "grpo-a" / "train.log").open("a") as f:
        f.write("(TaskRunner pid=42) step:4 - actor/pg_loss:0.4 - timing_s/step:2.4\n")
    set_age(archive / "grpo-a", 1800)
    shutil.rmtree(archive / "ppo-b")
    result3, _ = _evaluate(archive, result.cursor, instance)
    kinds = {type(r): r for r in result3.dynamic_partitions_requests}
    assert kinds[AddDynamicPartitionsRequest].partition_keys == ["dapo-live"]
    assert kinds[DeleteDynamicPartitionsRequest].partition_keys == ["ppo-b"]
    _apply(instance, result3)
    [request3] = result3.run_requests
    assert sorted(_selected(instance, request3)) == ["dapo-live", "grpo-a"]
    assert request3.tags["verl-health/reason"] == "changed+new"
    cursor3 = json.loads(result3.cursor)
    assert set(cursor3) == {"grpo-a", "dapo-live"}
    assert cursor3["grpo-a"] != cursor["grpo-a"]
    assert request3.run_key != request.run_key  # a new key, so Dagster runs it again


def test_a_changed_run_apart_from_the_new_ones_moves_to_the_end_and_shares_their_one_run(tmp_path):
    """A range selects every partition between its ends: a changed run with unchanged runs between it and the
    new one moves to the end of the partition order (deleted, then added again), so the tick is one request
    whose range holds the changed and the new run and no unchanged one."""
    archive = tmp_path / "archive"
    for rid in ("run-a", "run-b", "run-c"):
        write_run(archive, rid)
    instance = DagsterInstance.ephemeral()
    first, _ = _evaluate(archive, None, instance)
    _apply(instance, first)
    with (archive / "run-a" / "train.log").open("a") as f:
        f.write("(TaskRunner pid=42) step:4 - actor/pg_loss:0.4 - timing_s/step:2.4\n")
    set_age(archive / "run-a", 1800)
    write_run(archive, "run-d")
    result, _ = _evaluate(archive, first.cursor, instance)
    _apply(instance, result)
    assert instance.get_dynamic_partitions(RUN_PARTITIONS_NAME) == ["run-b", "run-c", "run-a", "run-d"]
    [request] = result.run_requests
    assert _selected(instance, request) == ["run-a", "run-d"]
    assert request.tags["verl-health/reason"] == "changed+new"


def test_primed_cursor_requests_nothing(tmp_path):
    archive = tmp_path / "archive"
    write_run(archive, "grpo-a")
    write_run(archive, "dapo-live", age_s=5)
    cursor = archive_cursor(ArchiveResource(root=str(archive), quiet_period_s=600))
    assert set(json.loads(cursor)) == {"grpo-a"}
    result, _ = _evaluate(archive, cursor, DagsterInstance.ephemeral())
    assert isinstance(result, SkipReason)


def _baselines(warehouse) -> dict[str, dict]:
    con = connect(warehouse)
    try:
        frame = con.execute("select * from run_baselines").df()
    finally:
        con.close()
    return {row["run_id"]: row for row in frame.astype(object).where(frame.notna(), None).to_dict("records")}


# the first line of verl's resolved-config pprint, naming the experiment (run_baselines compares a run with
# the earlier runs of its experiment)
CONFIG_LINE = ("(TaskRunner pid=42) {'actor_rollout_ref': {'rollout': {'n': 4}}, "
               "'trainer': {'project_name': 'p', 'experiment_name': 'grpo-exp'}}\n")


def test_a_run_analysed_by_the_sensors_job_gets_the_baseline_row_the_command_line_gives(tmp_path):
    archive = tmp_path / "archive"
    for age, (rid, steps) in enumerate((("grpo-c", 5), ("grpo-b", 4), ("grpo-a", 3)), start=1):
        log = write_run(archive, rid, steps=steps) / "train.log"
        log.write_text(CONFIG_LINE + log.read_text())
        set_age(log.parent, 3600.0 * age)  # grpo-a ended first, grpo-c last
    # the command line: the three runs at once
    analyze_archive(archive, tmp_path / "cli_wh", tmp_path / "cli_reports")
    # the daemon: two runs analysed before, the third found by the sensor and run by its job
    warehouse, instance = tmp_path / "wh", DagsterInstance.ephemeral()
    analyze_archive(archive, warehouse, tmp_path / "reports", instance=instance, include={"grpo-a", "grpo-b"})
    seen = {k: v for k, v in json.loads(archive_cursor(ArchiveResource(root=str(archive)))).items() if k != "grpo-c"}
    result, _ = _evaluate(archive, json.dumps(seen), instance, quiet_period_s=0)
    [request] = result.run_requests
    _apply(instance, result)
    job = build_definitions(archive, warehouse, tmp_path / "reports", quiet_period_s=0).resolve_job_def(
        finished_run_sensor.job_name)
    assert job.execute_in_process(instance=instance, tags=request.tags, asset_selection=request.asset_selection).success
    by_cli, by_sensor = _baselines(tmp_path / "cli_wh"), _baselines(warehouse)
    assert set(by_sensor) == {"grpo-a", "grpo-b", "grpo-c"}
    # grpo-a and grpo-b ended before grpo-c in its experiment: its baseline saw both
    assert by_sensor["grpo-c"]["exp_prior_runs"] == 2
    assert by_sensor["grpo-c"] == by_cli["grpo-c"]


def test_a_tick_over_twenty_finished_runs_is_one_run_that_rebuilds_each_fleet_table_once(tmp_path):
    archive = tmp_path / "archive"
    run_ids = [f"grpo-{i:02d}" for i in range(20)]
    for rid in run_ids:
        write_run(archive, rid)
    instance = DagsterInstance.ephemeral()
    result, _ = _evaluate(archive, None, instance, quiet_period_s=0)
    _apply(instance, result)
    [request] = result.run_requests
    assert sorted(_selected(instance, request)) == run_ids
    job = build_definitions(archive, tmp_path / "wh", tmp_path / "reports", quiet_period_s=0).resolve_job_def(
        finished_run_sensor.job_name)
    outcome = job.execute_in_process(instance=instance, tags=request.tags, asset_selection=request.asset_selection)
    assert outcome.success
    assert [r.job_name for r in instance.get_runs()] == ["analyze_batch"]
    done = Counter(e.asset_key.to_user_string() for e in outcome.all_events if e.is_step_materialization)
    assert {table: done[table] for table in fleet_tables()} == dict.fromkeys(fleet_tables(), 1)
    assert done["run_summary"] == len(run_ids)  # one materialisation per run partition
    assert sorted(p.stem for p in (tmp_path / "reports" / "runs").glob("*.html")) == run_ids
