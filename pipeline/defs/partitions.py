"""Partitions: one dynamic partition per archived verl run."""

from dagster import DynamicPartitionsDefinition

RUN_PARTITIONS_NAME = "run_id"

run_partitions = DynamicPartitionsDefinition(name=RUN_PARTITIONS_NAME)
