"""Per-run assets of two runs materialised at once on a dask.distributed cluster of real processes: `dask scheduler`
and two `dask worker` processes on loopback, as a deployment starts them."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance, execute_job
from distributed import Client
from operate_support import ROOT, VENV_BIN, free_port, port_open, service, simulate

from pipeline import lake
from pipeline.defs.definitions import reconstructable_job
from pipeline.defs.executors import dask_run_config, resources_run_config
from pipeline.defs.partitions import RUN_PARTITIONS_NAME
from pipeline.tables import with_inputs

# two runs of these tables side by side take 10 to 70 s on the shared 2-core machine
MAX_RUN_S = 150
TABLES = list(with_inputs("run_summary", "config_findings"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(scheduler address, pids of the two worker processes). The workers start with SIGTERM ignored: a process
    started from one that ran Dagster in its main thread with SIGINT ignored (a script's background job) has it,
    since Dagster gives SIGTERM SIGINT's action when a run ends; Dagster stops its compute-log `tail` processes
    with SIGTERM."""
    logs = tmp_path_factory.mktemp("dask")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = [VENV_BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", port,
                 "--dashboard-address", "127.0.0.1:0"]

    def worker(n):
        return service([VENV_BIN / "dask", "worker", address, "--host", "127.0.0.1", "--nthreads", 1, "--no-nanny",
                        "--no-dashboard", "--name", f"w{n}"], logs / f"worker{n}.log", lambda: _workers(address) > n,
                       cwd=ROOT, preexec_fn=_sigterm_ignored)

    with service(scheduler, logs / "scheduler.log", lambda: port_open(port)), worker(0) as w0, worker(1) as w1:
        yield address, {w0.pid, w1.pid}


def _sigterm_ignored() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _workers(address: str) -> int:
    with Client(address, timeout=10) as client:
        return len(client.scheduler_info()["workers"])


def test_run_assets_on_dask(tmp_path, cluster):
    address, worker_pids = cluster
    labels = simulate(tmp_path / "sim", runs=2, seed=3)
    run_ids = sorted(labels["runs"])
    warehouse = tmp_path / "warehouse"
    run_config = {
        **dask_run_config(address),
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

        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(launch, run_ids))
        # steps a minute apart (as once seen in CI: a 60 s wait per step, four levels of steps) fail this
        assert time.monotonic() - started < MAX_RUN_S

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
