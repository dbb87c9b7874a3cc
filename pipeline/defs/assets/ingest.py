"""Ingest layer: each archived run becomes its `runs`, `log_lines` and `step_metrics` partitions."""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from pipeline import tables
from pipeline.defs.partitions import run_partitions
from pipeline.defs.resources import ArchiveResource, WarehouseResource
from pipeline.incremental import INGEST_TABLES, REINGEST_TAG, ingest_is_current
from pipeline.ingest.batch import ingest_batch
from pipeline.isolation import isolate, mark_not_analysed
from pipeline.quality import contract_violations, lines_conserved, steps_contiguous

PREVIEW_ROWS = 20


def _first_problems(problems: dict[str, list[str]]) -> dict[str, list[str]]:
    """The problems of the first PREVIEW_ROWS runs by id, and how many runs are left out (`runs.problems` has every
    run's). Dagster copies a batch's metadata onto each run's materialisation of each ingest table: 50 KB of
    problems cost 4 ms per copy on the command line's record, 12 s for 1,000 runs."""
    kept = dict(sorted(problems.items())[:PREVIEW_ROWS])
    if len(problems) > PREVIEW_ROWS:
        kept["..."] = [f"{len(problems) - PREVIEW_ROWS} more runs with problems: see runs.problems"]
    return kept


def _preview(per_run: list[tuple]) -> str:
    """A markdown table of the first runs ingested: lines, steps, bytes, problems."""
    rows = ["| run_id | lines | steps | bytes | problems |", "|---|---:|---:|---:|---:|"]
    rows += [f"| {r} | {n:,} | {s:,} | {b:,} | {p} |" for r, n, s, b, p in per_run[:PREVIEW_ROWS]]
    if len(per_run) > PREVIEW_ROWS:
        rows.append(f"| ... {len(per_run) - PREVIEW_ROWS} more | | | | |")
    return "\n".join(rows)


@multi_asset(
    specs=[AssetSpec(t, description=tables.table(t).description) for t in INGEST_TABLES],
    check_specs=[
        AssetCheckSpec("lines_conserved", asset="log_lines", blocking=True,
                       description="Lines in equal lines out for every run."),
        AssetCheckSpec("steps_contiguous", asset="step_metrics",
                       description="Steps have no gaps within a resume segment."),
        *[AssetCheckSpec("matches_contract", asset=t, blocking=True,
                         description="Has every column of the design contract.") for t in INGEST_TABLES],
    ],
    partitions_def=run_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="ingest",
)
def ingested_run(context: AssetExecutionContext, archive: ArchiveResource, warehouse: WarehouseResource):
    """Stream each run's logs from the archive into the Parquet lake (one partition per run).

    A run whose archive entry is unchanged since its last ingest is skipped (a sensor re-request
    after a launch, a restarted backfill), unless the Dagster run carries the tag
    `verl-health/reingest=true`.
    """
    run_ids = list(context.partition_keys)
    entries = {e.run_id: e for e in archive.discover(only=set(run_ids)).entries}
    totals = {"lines": 0, "steps": 0, "bytes": 0, "parse_failures": 0}
    problems: dict[str, list[str]] = {}
    per_run: list[tuple] = []
    unchanged: list[str] = []
    reingest = context.run.tags.get(REINGEST_TAG, "").lower() == "true"
    limits = archive.limits()  # read once: resolving the settings costs milliseconds
    todo = []
    for run_id in run_ids:
        entry = entries.get(run_id)
        if entry is None:
            problems[run_id] = [f"run {run_id} is no longer in the archive {archive.root}"]
            context.log.warning(problems[run_id][0])
        elif not reingest and ingest_is_current(entry, warehouse.root):
            unchanged.append(run_id)
        else:
            todo.append(entry)
    batches, crashed = isolate(todo, lambda entries: list(ingest_batch(entries, warehouse.root, limits)))
    outcomes = [o for batch in batches for o in batch] + [(todo[i], None, error) for i, error in crashed.items()]
    for entry, result, failure in outcomes:
        run_id = entry.run_id
        if result is None:
            problems[run_id] = [mark_not_analysed(warehouse.root, run_id, "ingest", failure)]
            context.log.error(f"{run_id}: {problems[run_id][0]}")
            continue
        per_run.append((run_id, result.n_lines, result.n_steps, result.n_bytes, len(result.problems)))
        totals["lines"] += result.n_lines
        totals["steps"] += result.n_steps
        totals["bytes"] += result.n_bytes
        totals["parse_failures"] += result.n_parse_failures
        if result.problems:
            problems[run_id] = list(result.problems)
            context.log.warning(f"{run_id}: {len(result.problems)} problem(s): " + "; ".join(result.problems))
    meta = {
        "runs": len(run_ids),
        "lines": totals["lines"],
        "steps": totals["steps"],
        "bytes": totals["bytes"],
        "parse_failures": totals["parse_failures"],
        "runs_with_problems": len(problems),
        "unchanged_runs_skipped": len(unchanged),
        "problems": MetadataValue.json(_first_problems(problems)),
        "preview": MetadataValue.md(_preview(per_run)),
        "path": MetadataValue.path(str(warehouse.root)),
    }
    for table in INGEST_TABLES:
        yield MaterializeResult(asset_key=table, metadata=meta)
    # runs whose ingest failed are reported above; checking them too would block the whole batch
    ingested = [r[0] for r in per_run] + unchanged
    bad_lines = lines_conserved(warehouse.root, ingested)
    yield AssetCheckResult(
        check_name="lines_conserved", asset_key="log_lines", passed=not bad_lines,
        metadata={"runs_losing_lines": MetadataValue.json(bad_lines)},
    )
    gaps = steps_contiguous(warehouse.root, ingested)
    yield AssetCheckResult(
        check_name="steps_contiguous", asset_key="step_metrics", passed=not gaps,
        severity=AssetCheckSeverity.WARN, metadata={"gaps": MetadataValue.json(gaps)},
    )
    for table in INGEST_TABLES:
        missing = contract_violations(warehouse.root, table, ingested)
        yield AssetCheckResult(check_name="matches_contract", asset_key=table, passed=not missing,
                               metadata={"missing_columns": MetadataValue.json(missing)})
