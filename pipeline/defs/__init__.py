"""The Dagster shell: assets, jobs, the sensor, the schedule, resources, executors and the instance storage over the core in `pipeline/`."""
