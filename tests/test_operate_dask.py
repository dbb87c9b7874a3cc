"""Per-run assets of two runs materialised at once on a local dask.distributed cluster with two workers."""

import os
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance, execute_job
from distributed import Client, LocalCluster
from operate_support import simulate

from pipeline import lake
from pipeline.definitions import reconstructable_job
from pipeline.executors import dask_run_config, resources_run_config
from pipeline.partitions import RUN_PARTITIONS_NAME

TABLES = ["runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
          "config_findings"]


@pytest.fixture
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0") as local:
        yield local


def test_run_assets_on_dask(tmp_path, cluster):
    labels = simulate(tmp_path / "sim", runs=2, seed=3)
    run_ids = sorted(labels["runs"])
    warehouse = tmp_path / "warehouse"
    run_config = {
        **dask_run_config(cluster.scheduler_address),
        **resources_run_config(tmp_path / "sim" / "archive", warehouse, tmp_path / "reports", quiet_period_s=0),
    }
    job = reconstructable_job("run_assets_dask_job")
    (tmp_path / "dagster_home").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster_home")) as instance:
        instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, run_ids)

        def launch(run_id):
            with execute_job(job, instance, run_config=run_config, tags={"dagster/partition": run_id},
                             asset_selection=[AssetKey(t) for t in TABLES]) as result:
                events = result.all_events
                materialized = {e.asset_key.to_user_string() for e in events if e.is_step_materialization}
                step_pids = {e.pid for e in events if e.is_step_success}
                return result.success, materialized, step_pids

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(launch, run_ids))

    with Client(cluster) as client:
        worker_pids = set(client.run(os.getpid).values())
    for success, materialized, step_pids in outcomes:
        assert success
        assert materialized == set(TABLES)
        assert step_pids and step_pids <= worker_pids  # every step ran in a dask worker process
    for run_id in run_ids:
        for table in TABLES:
            assert (lake.run_partition_dir(warehouse, table, run_id) / "part-0.parquet").is_file(), (table, run_id)
        runs = pq.read_table(lake.run_partition_dir(warehouse, "runs", run_id))
        lines = pq.read_table(lake.run_partition_dir(warehouse, "log_lines", run_id))
        assert lines.num_rows == runs.column("n_lines")[0].as_py() > 0
        summary = pq.read_table(lake.run_partition_dir(warehouse, "run_summary", run_id))
        assert summary.num_rows == 1
        assert summary.column("last_step")[0].as_py() == labels["runs"][run_id]["last_step"]
