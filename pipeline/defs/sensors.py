"""Sensors: new finished runs in the archive, and mail when one of the pipeline's own runs fails."""

from __future__ import annotations

import hashlib
import json

from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    DeleteDynamicPartitionsRequest,
    RunFailureSensorContext,
    RunRequest,
    RunStatusSensorContext,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    run_status_sensor,
    sensor,
)

from pipeline.alerts import pipeline_failure_message, run_attention_message, runs_needing_attention
from pipeline.defs.assets import RUN_JOB_ASSETS
from pipeline.defs.jobs import FORKED_STEPS, analyze_batch
from pipeline.defs.partitions import RUN_PARTITIONS_NAME, batch_moves, partition_tags
from pipeline.defs.resources import ArchiveResource, SmtpResource, WarehouseResource
from pipeline.report import send_mail

# tags of the sensor's runs: why the runs were requested (new, changed or both) and how many runs the range holds
REASON_TAG = "verl-health/reason"
RUNS_TAG = "verl-health/runs"


def entry_fingerprint(entry) -> str:
    """What changes when a run's files change: size and newest modification time."""
    return f"{entry.size}:{int(entry.mtime)}"


def plan_archive_changes(entries, seen: dict[str, str]) -> tuple[list[str], list[str], list[str], dict[str, str]]:
    """From discovered entries and the cursor's {run_id: fingerprint}: (new, changed, removed, next cursor).

    Unfinished runs are neither requested nor recorded, so they are picked up once they finish.
    """
    new, changed, cursor = [], [], {}
    present = set()
    for e in entries:
        present.add(e.run_id)
        if not e.finished:
            if e.run_id in seen:
                cursor[e.run_id] = seen[e.run_id]
            continue
        fp = entry_fingerprint(e)
        cursor[e.run_id] = fp
        if e.run_id not in seen:
            new.append(e.run_id)
        elif seen[e.run_id] != fp:
            changed.append(e.run_id)
    removed = sorted(set(seen) - present)
    return sorted(new), sorted(changed), removed, cursor


def archive_cursor(archive: ArchiveResource) -> str:
    """The sensor cursor that marks every finished run of the archive as seen (set it after a backfill)."""
    _, _, _, cursor = plan_archive_changes(archive.discover().entries, {})
    return json.dumps(cursor, sort_keys=True)


def batch_request(batch: list[str], new: list[str], changed: list[str], cursor: dict[str, str]) -> RunRequest:
    """The one run of a tick: `analyze_batch` over the partition range of the runs that finished or changed since
    the last tick (`batch`, consecutive partitions in partition order), so its fleet tables are rebuilt once."""
    why = {**{rid: "new" for rid in new}, **{rid: "changed" for rid in changed}}
    fingerprints = json.dumps([[rid, cursor[rid]] for rid in batch])
    digest = hashlib.sha256(fingerprints.encode()).hexdigest()[:16]
    return RunRequest(
        run_key=f"{batch[0]}..{batch[-1]}@{digest}",
        # a range run gets no partition's default config: the job's forked step processes, said again
        run_config=FORKED_STEPS,
        asset_selection=[AssetKey(a) for a in RUN_JOB_ASSETS],
        tags={**partition_tags(batch), REASON_TAG: "+".join(sorted({why[rid] for rid in batch})),
              RUNS_TAG: str(len(batch))},
    )


@sensor(
    job=analyze_batch,
    minimum_interval_seconds=120,
    default_status=DefaultSensorStatus.STOPPED,
    description="Adds a run_id partition for each new finished run, moves changed runs to the end of the partition "
                "order, and requests one run over the range of the runs finished or changed since the last tick: "
                "their per-run assets, and the fleet tables rebuilt once.",
)
def finished_run_sensor(context: SensorEvaluationContext, archive: ArchiveResource):
    """Watch the archive root; request each finished run once, again when its files change, a tick's runs together."""
    seen = json.loads(context.cursor) if context.cursor else {}
    found = archive.discover()
    for err in found.errors:
        context.log.warning(err)
    new, changed, removed, cursor = plan_archive_changes(found.entries, seen)
    if not (new or changed or removed):
        context.update_cursor(json.dumps(cursor, sort_keys=True))
        return SkipReason(f"no new or changed finished runs among {len(found.entries)} entries")
    existing = [k for k in context.instance.get_dynamic_partitions(RUN_PARTITIONS_NAME) if k not in removed]
    # the tick's runs become one stretch at the end of the order; a changed run whose partition an operator
    # deleted gets it back
    ticked = sorted(new + changed)
    moved, added = batch_moves(existing, ticked)
    dynamic = []
    if removed or moved:
        dynamic.append(DeleteDynamicPartitionsRequest(RUN_PARTITIONS_NAME, [*removed, *moved]))
    if added:
        dynamic.append(AddDynamicPartitionsRequest(RUN_PARTITIONS_NAME, added))
    order = [k for k in existing if k not in set(moved)] + added
    batch = [k for k in order if k in set(ticked)]
    return SensorResult(
        run_requests=[batch_request(batch, new, changed, cursor)] if batch else [],
        dynamic_partitions_requests=dynamic,
        cursor=json.dumps(cursor, sort_keys=True),
    )


@run_failure_sensor(
    default_status=DefaultSensorStatus.STOPPED,
    description="Mails the team when one of verl-health's own Dagster runs fails.",
)
def pipeline_failure_mail(context: RunFailureSensorContext, smtp: SmtpResource):
    """Send a short mail naming the failed job, the run id and the error."""
    if not smtp.enabled:
        context.log.info("mail not configured; failure not mailed")
        return
    send_mail(pipeline_failure_message(context.dagster_run, context.failure_event, smtp), smtp.settings())


def summarised_runs(instance, dagster_run_id: str) -> list[str]:
    """The verl run_ids whose `run_summary` a Dagster run materialised."""
    records = instance.all_logs(dagster_run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
    return sorted({
        r.dagster_event.partition for r in records
        if r.dagster_event.asset_key.to_user_string() == "run_summary" and r.dagster_event.partition
    })


@run_status_sensor(
    run_status=DagsterRunStatus.SUCCESS,
    monitored_jobs=[analyze_batch],
    default_status=DefaultSensorStatus.STOPPED,
    description="Mails when newly analysed verl runs failed or show anomalous steps (optional).",
)
def run_attention_mail(context: RunStatusSensorContext, smtp: SmtpResource, warehouse: WarehouseResource):
    """After a run of analyze_batch succeeds, mail the runs it analysed that failed or have anomalous steps."""
    runs = runs_needing_attention(warehouse.root, summarised_runs(context.instance, context.dagster_run.run_id))
    if not runs:
        return
    if not smtp.enabled:
        context.log.info(f"{len(runs)} runs need attention; mail not configured")
        return
    send_mail(run_attention_message(runs, smtp), smtp.settings())
