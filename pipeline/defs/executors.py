"""Scale-out: the per-run assets on a dask.distributed cluster through dagster-dask.

`run_assets_dask_job` is the sensor's selection of `analyze_batch` on a dask executor: each step of a run
(ingest, the derive tables, scoring, the report) is a task on the cluster, and runs of different partitions
launched side by side share its workers. Workers import `pipeline.defs.definitions`, so they need this
package and the same VERL_HEALTH_* variables (or the resources in the run config, see
`resources_run_config`).

`run_scoped_dask_executor` is dagster-dask 0.29's executor with two fixes: (1) it passes the
Dagster run inside the task's callable, because distributed 2026.x walks tuple arguments and a
partitioned DagsterRun refuses iteration (the stock executor fails every partitioned run with
"Iteration is not allowed on `@record` KeyRangesPartitionsSubset"); (2) it puts the Dagster run id
in each task key: the stock `<job>.<step>` key is shared by two runs of one job in flight at once,
and dask would hand the second run the first run's result.
"""

from __future__ import annotations

import functools

import dask.distributed
from dagster import (
    define_asset_job,
    executor,
    multiple_process_executor_requirements,
    raise_execution_interrupts,
)
from dagster_dask import dask_executor
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker

from pipeline.defs.assets import RUN_JOB_ASSETS

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


class RunScopedDaskExecutor(DaskExecutor):
    """dagster-dask's executor for an existing or local cluster, with task keys unique per Dagster run."""

    def execute(self, plan_context, execution_plan):
        """Submit every step as a dask task that waits for its upstream steps; yield their events."""
        if not plan_context.instance.is_persistent:
            raise ValueError("dask execution needs a persistent Dagster instance (set DAGSTER_HOME)")
        if self.cluster_type == "existing":
            cluster = self.cluster_configuration["address"]
        elif self.cluster_type == "local":
            cluster = dask.distributed.LocalCluster(**self.build_dict(plan_context.job_name))
        else:
            raise ValueError(f"cluster type {self.cluster_type!r}: use dagster_dask.dask_executor for it")
        run_id = plan_context.dagster_run.run_id
        with dask.distributed.Client(cluster) as client:
            futures = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    upstream = [futures[k] for inp in step.step_inputs for k in inp.dependency_keys]
                    # Bound into the callable: dask walks tuple arguments, and a DagsterRun refuses that.
                    task = functools.partial(
                        query_on_dask_worker,
                        recon_job=plan_context.reconstructable_job,
                        dagster_run=plan_context.dagster_run,
                        run_config=plan_context.run_config,
                        step_keys=[step.key],
                        instance_ref=plan_context.instance.get_ref(),
                        known_state=execution_plan.known_state,
                    )
                    futures[step.key] = client.submit(
                        task,
                        upstream,
                        key=f"{plan_context.job_name}.{run_id}.{step.key}",
                        resources=get_dask_resource_requirements(step.tags),
                    )
            done = iter(dask.distributed.as_completed(list(futures.values()), with_results=True))
            while True:
                # an interrupt (a run terminated) lands while waiting on the cluster, not mid-event
                with raise_execution_interrupts():
                    finished = next(done, None)
                if finished is None:
                    break
                yield from finished[1]
        if self.cluster_type == "local":
            cluster.close()


@executor(
    name="dask_run_scoped",
    config_schema=dask_executor.config_schema,
    requirements=multiple_process_executor_requirements(),
)
def run_scoped_dask_executor(init_context):
    """dagster-dask's `dask` executor config (`cluster: existing|local`), safe for concurrent runs of a job."""
    ((cluster_type, cluster_configuration),) = init_context.executor_config["cluster"].items()
    return RunScopedDaskExecutor(cluster_type, cluster_configuration)


def dask_run_config(address: str | None = None) -> dict:
    """Executor run config for an existing scheduler: `address` (tcp://host:8786), or $DASK_SCHEDULER_ADDRESS."""
    source = address if address else {"env": SCHEDULER_ENV}
    return {"execution": {"config": {"cluster": {"existing": {"address": source}}}}}


def resources_run_config(archive: str, warehouse: str, reports: str, quiet_period_s: int = 600) -> dict:
    """Run config that points the resources at explicit locations (overrides the VERL_HEALTH_* defaults)."""
    return {
        "resources": {
            "archive": {"config": {"root": str(archive), "quiet_period_s": quiet_period_s}},
            "warehouse": {"config": {"path": str(warehouse)}},
            "reports": {"config": {"path": str(reports)}},
        }
    }


run_assets_dask_job = define_asset_job(
    "run_assets_dask_job",
    selection=RUN_JOB_ASSETS,
    executor_def=run_scoped_dask_executor,
    config=dask_run_config(),
    description="The run job's assets with each step a task on the dask.distributed cluster at $DASK_SCHEDULER_ADDRESS.",
)

