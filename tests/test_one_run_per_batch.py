"""A batch of runs is one Dagster run of the named job `analyze_batch`, even when its runs are apart in the
partition order: re-analysed runs move to the end of the order and one range selects them and no other run."""

from dagster import AssetKey, DagsterEventType, DagsterInstance
from operate_support import set_age, write_run

from pipeline.defs.analysis import analyze_archive
from pipeline.defs.partitions import RANGE_END_TAG, RANGE_START_TAG, RUN_PARTITIONS_NAME
from pipeline.lake import connect

RUNS = ["run-a", "run-b", "run-c", "run-d"]


def _last_steps(warehouse) -> dict[str, int]:
    con = connect(warehouse)
    try:
        return dict(con.execute("select run_id, last_step from run_summary order by run_id").fetchall())
    finally:
        con.close()


def _range(instance, run) -> list[str]:
    keys = instance.get_dynamic_partitions(RUN_PARTITIONS_NAME)
    return keys[keys.index(run.tags[RANGE_START_TAG]):keys.index(run.tags[RANGE_END_TAG]) + 1]


def _materialised(instance, run, asset: str) -> int:
    """How many materialisations of `asset` the Dagster `run` recorded."""
    return sum(e.dagster_event.asset_key == AssetKey(asset)
               for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION))


def test_two_changed_runs_apart_in_the_partition_order_are_one_run_of_analyze_batch(tmp_path):
    archive, warehouse, reports = tmp_path / "archive", tmp_path / "wh", tmp_path / "reports"
    for rid in RUNS:
        write_run(archive, rid, steps=3)
    instance = DagsterInstance.ephemeral()
    analyze_archive(archive, warehouse, reports, instance=instance)
    [first] = instance.get_runs()
    assert first.job_name == "analyze_batch" and _range(instance, first) == RUNS
    assert _last_steps(warehouse) == dict.fromkeys(RUNS, 3)
    pages = {rid: (reports / "runs" / f"{rid}.html").stat().st_mtime_ns for rid in RUNS}

    # run-a and run-c log four more steps (run-b lies between them in the partition order)
    for rid in ("run-a", "run-c"):
        with (archive / rid / "train.log").open("a") as f:
            f.write("".join(f"(TaskRunner pid=42) step:{s} - actor/pg_loss:0.{s} - timing_s/gen:1.{s} - "
                            f"timing_s/step:2.{s}\n" for s in range(4, 8)))
        set_age(archive / rid, 1800)
    outcome = analyze_archive(archive, warehouse, reports, instance=instance)

    assert sorted(outcome.run_ids) == ["run-a", "run-c"] and sorted(outcome.unchanged) == ["run-b", "run-d"]
    runs = instance.get_runs()  # newest first
    assert len(runs) == 2
    batch = runs[0]
    assert batch.job_name == "analyze_batch"
    assert sorted(_range(instance, batch)) == ["run-a", "run-c"]
    # the moved runs keep the materialisations of the first analysis, and gain this one's
    summaries = instance.all_logs(batch.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    assert sorted(e.dagster_event.partition for e in summaries
                  if e.dagster_event.asset_key.to_user_string() == "run_summary") == ["run-a", "run-c"]
    assert instance.get_materialized_partitions(AssetKey("run_summary")) == set(RUNS)
    assert instance.all_logs(batch.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    # the tables and the reports of both changed runs are new; the others' are as they were
    assert _last_steps(warehouse) == {"run-a": 7, "run-b": 3, "run-c": 7, "run-d": 3}
    for rid in RUNS:
        changed = (reports / "runs" / f"{rid}.html").stat().st_mtime_ns != pages[rid]
        assert changed == (rid in ("run-a", "run-c")), rid
    page = (reports / "runs" / "run-c.html").read_text(encoding="utf-8")
    assert "step 7" in page


def test_a_batch_over_the_cap_is_consecutive_runs_of_the_whole_graph(tmp_path, monkeypatch):
    """A Dagster run in this process holds its events until it ends: past MAX_RUNS_PER_RUN runs a batch is analysed
    as consecutive runs of analyze_batch, each over at most that many partitions; the first fits the model, every
    one writes its runs' tables and reports, and the last writes the fleet report, with every run."""
    from pipeline.defs import analysis

    monkeypatch.setattr(analysis, "MAX_RUNS_PER_RUN", 2)
    archive, warehouse, reports = tmp_path / "archive", tmp_path / "wh", tmp_path / "reports"
    names = [f"run-{c}" for c in "abcde"]
    for rid in names:
        write_run(archive, rid, steps=4)
    instance = DagsterInstance.ephemeral()
    said = []
    outcome = analyze_archive(archive, warehouse, reports, instance=instance, progress=said.append)

    assert sorted(outcome.run_ids) == names
    runs = instance.get_runs()[::-1]  # oldest first
    assert [r.job_name for r in runs] == ["analyze_batch"] * 3
    assert [_range(instance, r) if "dagster/partition" not in r.tags else [r.tags["dagster/partition"]]
            for r in runs] == [names[0:2], names[2:4], names[4:]]
    fits = [_materialised(instance, r, "anomaly_model") > 0 for r in runs]
    assert fits == [True, False, False]
    # the fleet report, the slowest fleet step, only once: the earlier runs' reports would be overwritten
    assert [_materialised(instance, r, "fleet_report") for r in runs] == [0, 0, 1]
    assert _last_steps(warehouse) == dict.fromkeys(names, 4)
    assert all((reports / "runs" / f"{rid}.html").is_file() for rid in names)
    fleet = outcome.fleet_report.read_text(encoding="utf-8")
    assert all(rid in fleet for rid in names)
    assert any(m.startswith("part 3 of 3: ") for m in said), said
