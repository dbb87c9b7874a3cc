"""`analyze_batch`: the one asset job every way in runs (the command line, the sensor, the nightly schedule
and the launcher jobs of pipeline/defs/launchers.py), one Dagster run per batch of runs."""

from dagster import AssetSelection, define_asset_job

# The run config of a run that names none (the sensor's, the schedule's, a launch without -c): its steps in
# processes forked from a server that imported pipeline.defs.definitions once. A spawned step process pays the imports
# again, ~6 s of CPU each, most of a small run's cost on a busy machine.
FORKED_STEPS = {"execution": {"config": {"multiprocess": {
    "max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": ["pipeline.defs.definitions"]}}}}}}

analyze_batch = define_asset_job(
    "analyze_batch",
    selection=AssetSelection.all(),
    config=FORKED_STEPS,
    description="The whole graph over one batch of runs, a range of consecutive run_id partitions: ingest, "
                "derive, score and report each run, rebuild the fleet tables once, refit the model when due and "
                "render the fleet report. Each launch selects the assets it needs (the mail only when asked).",
)
