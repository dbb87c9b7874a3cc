"""Partitions: one dynamic partition per archived verl run, and the run tags that select a batch of them."""

from dagster import DagsterInstance, DynamicPartitionsDefinition

RUN_PARTITIONS_NAME = "run_id"

run_partitions = DynamicPartitionsDefinition(name=RUN_PARTITIONS_NAME)

# Dagster's run tags that select a range of partitions (plain strings, as its docs give them)
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def partition_tags(run_ids: list[str]) -> dict[str, str]:
    """Dagster run tags that select exactly `run_ids`, consecutive partitions (a range, or one key)."""
    if len(run_ids) == 1:
        return {"dagster/partition": run_ids[0]}
    return {RANGE_START_TAG: run_ids[0], RANGE_END_TAG: run_ids[-1]}


def contiguous_ranges(partitions: list[str], wanted: set[str]) -> list[list[str]]:
    """The wanted partitions as stretches of consecutive partitions, so a range selects no other run."""
    ranges: list[list[str]] = []
    previous_wanted = False
    for key in partitions:
        if key in wanted:
            if previous_wanted:
                ranges[-1].append(key)
            else:
                ranges.append([key])
        previous_wanted = key in wanted
    return ranges


def batch_moves(partitions: list[str], run_ids: list[str]) -> tuple[list[str], list[str]]:
    """How to make `run_ids` one stretch of consecutive partitions, so one range selects them and no other run:
    (partitions to delete, partitions to add at the end, in this order). New runs are added at the end; runs
    already there move to the end only when they are apart or new runs follow them elsewhere. Dagster keeps a
    deleted partition's materialisations, so a moved run keeps its history."""
    wanted = set(run_ids)
    present = [k for k in partitions if k in wanted]
    new = sorted(wanted - set(partitions))
    at_end = bool(present) and partitions[-len(present):] == present
    if len(contiguous_ranges(partitions, wanted)) > 1 or (new and present and not at_end):
        return present, present + new
    return [], new


def place_batch(instance: DagsterInstance, run_ids: list[str]) -> list[str]:
    """Make `run_ids` consecutive run partitions in `instance` (`batch_moves`); returns them in partition order."""
    delete, add = batch_moves(instance.get_dynamic_partitions(RUN_PARTITIONS_NAME), run_ids)
    for key in delete:
        instance.delete_dynamic_partition(RUN_PARTITIONS_NAME, key)
    if add:
        instance.add_dynamic_partitions(RUN_PARTITIONS_NAME, add)
    wanted = set(run_ids)
    return [k for k in instance.get_dynamic_partitions(RUN_PARTITIONS_NAME) if k in wanted]
