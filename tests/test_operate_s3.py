"""Archive and warehouse in an S3 bucket on a real S3 server (SeaweedFS's `weed server -s3` on 127.0.0.1, started
for the module): staged, analysed, published, queried, analysed again."""

import gzip

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from operate_support import S3_KEY, S3_SECRET, s3_server, simulate, write_run

from pipeline import lake
from pipeline.objectstore import connect_remote, publish_warehouse, s3_filesystem, stage_archive
from pipeline.tables import with_inputs


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("seaweedfs"), buckets=("archive-bkt", "lake-bkt")) as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """The filesystem verl-health makes from the AWS_* variables, pointed at the server."""
    for key, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": S3_KEY,
                       "AWS_SECRET_ACCESS_KEY": S3_SECRET, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return s3_filesystem()


def _put(fs, path, data: bytes):
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


def _upload_tree(fs, local, base):
    for path in sorted(local.rglob("*")):
        if path.is_file():
            _put(fs, f"{base}/{path.relative_to(local).as_posix()}", path.read_bytes())


def test_stage_archive_mirrors_only_changes(s3, tmp_path):
    _put(s3, "archive-bkt/verl/run-a/train.log", b"step:1 - a:1\n")
    _put(s3, "archive-bkt/verl/run-a/ray_logs/worker-1.err", b"warn\n")
    _put(s3, "archive-bkt/verl/run-b.log.gz", gzip.compress(b"step:1 - a:1\n"))
    cache = stage_archive("s3://archive-bkt/verl", tmp_path / "cache")
    files = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert files == ["run-a/ray_logs/worker-1.err", "run-a/train.log", "run-b.log.gz"]
    assert gzip.decompress((cache / "run-b.log.gz").read_bytes()) == b"step:1 - a:1\n"
    info = s3.get_file_info("archive-bkt/verl/run-a/train.log")
    assert int((cache / "run-a/train.log").stat().st_mtime) == int(info.mtime.timestamp())
    newest = max(i.mtime.timestamp() for i in s3.get_file_info(["archive-bkt/verl/run-a/train.log",
                                                                 "archive-bkt/verl/run-a/ray_logs/worker-1.err"]))
    assert int((cache / "run-a").stat().st_mtime) == int(newest)  # the run folder looks as old as its files
    untouched = (cache / "run-a/ray_logs/worker-1.err").stat().st_ino

    _put(s3, "archive-bkt/verl/run-a/train.log", b"step:1 - a:1\nstep:2 - a:2\n")
    s3.delete_file("archive-bkt/verl/run-b.log.gz")
    stage_archive("s3://archive-bkt/verl", cache)
    assert (cache / "run-a/train.log").read_bytes().endswith(b"step:2 - a:2\n")
    assert not (cache / "run-b.log.gz").exists()
    assert (cache / "run-a/ray_logs/worker-1.err").stat().st_ino == untouched


def test_publish_and_query_a_warehouse(s3, tmp_path):
    wh = tmp_path / "wh"
    for rid, n in (("run-a", 3), ("run-b", 2)):
        lake.write_run_table(wh, "step_metrics", rid, pa.table({"step": list(range(n)), "value": [0.5] * n}))
    lake.write_run_table(wh, "runs", "run-a", pa.table({"n_lines": [3], "note": pa.array([None], pa.string())}))
    lake.write_run_table(wh, "runs", "run-b", pa.table({"n_lines": [2], "note": pa.array([None], pa.null())}))
    lake.write_fleet_table(wh, "fleet_daily", pa.table({"day": ["2026-11-29"], "runs": [2]}))
    lake.refresh_catalog(wh)

    assert publish_warehouse(wh, "s3://lake-bkt/wh") == {"uploaded": 5, "deleted": 0, "kept": 0}
    keys = {i.path for i in s3.get_file_info(pafs.FileSelector("lake-bkt/wh", recursive=True))
            if i.type == pafs.FileType.File}
    assert "lake-bkt/wh/warehouse.duckdb" not in keys  # views over local paths mean nothing in a bucket
    con = connect_remote("s3://lake-bkt/wh")
    assert con.execute("select run_id, count(*) from step_metrics group by all order by 1").fetchall() == [
        ("run-a", 3), ("run-b", 2)]
    assert con.execute("select sum(n_lines) from runs").fetchone()[0] == 5
    assert con.execute("select runs from fleet_daily").fetchone()[0] == 2

    assert publish_warehouse(wh, "s3://lake-bkt/wh")["uploaded"] == 0
    lake.delete_run(wh, "run-b")
    assert publish_warehouse(wh, "s3://lake-bkt/wh") == {"uploaded": 0, "deleted": 2, "kept": 3}
    assert connect_remote("s3://lake-bkt/wh").execute("select count(*) from step_metrics").fetchone()[0] == 3


def test_dagster_resources_read_and_publish_s3_urls(s3, tmp_path):
    from dagster import DagsterInstance, materialize

    from pipeline.defs.definitions import build_definitions
    from pipeline.defs.partitions import RUN_PARTITIONS_NAME, partition_tags
    from pipeline.defs.resources import ArchiveResource, WarehouseResource

    labels = simulate(tmp_path / "sim", runs=2, seed=12)
    _upload_tree(s3, tmp_path / "sim" / "archive", "archive-bkt/nightly")
    defs = build_definitions("s3://archive-bkt/nightly", "s3://lake-bkt/nightly-wh", tmp_path / "reports",
                             quiet_period_s=0)
    # built anew, not model_copy'd: Dagster sets a run's resources up from their constructor arguments
    resources = {**defs.resources,
                 "archive": ArchiveResource(root="s3://archive-bkt/nightly", quiet_period_s=0,
                                            cache_dir=str(tmp_path / "mirror")),
                 "warehouse": WarehouseResource(path="s3://lake-bkt/nightly-wh", cache_dir=str(tmp_path / "build"))}
    run_ids = sorted(labels["runs"])
    assert sorted(e.run_id for e in resources["archive"].discover().entries) == run_ids
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, run_ids)
    assert materialize(list(defs.assets), instance=instance, resources=resources, tags=partition_tags(run_ids),
                       selection=list(with_inputs("run_summary"))).success
    result = materialize(list(defs.assets), instance=instance, resources=resources,
                         selection=["published_warehouse"])
    assert result.success
    [event] = result.get_asset_materialization_events()
    assert event.materialization.metadata["published"].value is True
    summary = dict(connect_remote("s3://lake-bkt/nightly-wh").execute(
        "select run_id, failure_class from run_summary").fetchall())
    assert summary == {rid: labels["runs"][rid]["failure_class"] for rid in run_ids}


def test_analyze_command_takes_s3_urls(s3, tmp_path, monkeypatch, capsys):
    """`verl-health analyze s3://... --warehouse s3://...` mirrors the archive, analyses every run, writes
    the reports locally and publishes a warehouse whose tables answer from the bucket."""
    from pipeline import cli

    labels = simulate(tmp_path / "sim", runs=3, seed=11)
    _upload_tree(s3, tmp_path / "sim" / "archive", "archive-bkt/cli")
    monkeypatch.setenv("VERL_HEALTH_CACHE", str(tmp_path / "cache"))
    assert cli.main(["analyze", "s3://archive-bkt/cli", "--warehouse", "s3://lake-bkt/cli-wh",
                     "--reports", str(tmp_path / "reports")]) == 0
    assert "warehouse published to s3://lake-bkt/cli-wh" in capsys.readouterr().out
    con = connect_remote("s3://lake-bkt/cli-wh")
    assert {r for (r,) in con.execute("select run_id from run_summary").fetchall()} == set(labels["runs"])
    n_lines = con.execute("select count(*) from log_lines").fetchone()[0]
    assert n_lines == con.execute("select sum(n_lines) from runs").fetchone()[0] > 0
    for rid in labels["runs"]:
        assert (tmp_path / "reports" / "runs" / f"{rid}.html").is_file()
    assert list((tmp_path / "cache").iterdir()), "the archive was mirrored into VERL_HEALTH_CACHE"

    # a run lands in the bucket: the rerun analyses it alone and publishes the warehouse with it
    _upload_tree(s3, write_run(tmp_path / "more", "grpo-late").parent, "archive-bkt/cli")
    assert cli.main(["analyze", "s3://archive-bkt/cli", "--warehouse", "s3://lake-bkt/cli-wh",
                     "--reports", str(tmp_path / "reports")]) == 0
    out = capsys.readouterr().out
    assert "analysed 1 runs" in out and f"{len(labels['runs'])} runs unchanged" in out
    con = connect_remote("s3://lake-bkt/cli-wh")
    assert {r for (r,) in con.execute("select run_id from run_summary").fetchall()} == {*labels["runs"], "grpo-late"}
