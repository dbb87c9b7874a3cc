"""Dagster's bookkeeping alone for a batch of runs: one Dagster run over N partitions of `--assets` trivial
single-run-backfill assets (12: as many as the pipeline's per-run assets), recorded by Dagster's stock SQLite
storage as it comes ("stock"), by the storage subclass the command line used up to a8c1c43 ("subclass": one
pooled engine per database, `synchronous=OFF`, Dagster's event batches in one transaction; it extended
Dagster's private `SqliteEventLogStorage`, read here from git), by the stock storage with the command line's
public SQLAlchemy listener that sets `synchronous=OFF` on the instance's files ("public",
pipeline/defs/storage.py), the same planning each asset's range in one event as `analyze` does
("public-one-plan", pipeline.defs.storage.plan_ranges_in_one_event), and Dagster's in-memory instance
("memory", "memory-one-plan"). With no work in the assets, this is the floor of what recording a batch costs.

Each mode runs in its own subprocess with a fresh instance folder; prints wall and CPU seconds and the
ratios to the stock storage.

`--metadata-kb K` puts a JSON metadata value of about K KB on each asset's result, which Dagster copies onto
every partition's materialisation.

`--shape analyze_batch` records instead a graph of the shape of the `analyze_batch` job: the same asset keys,
dependencies, partitioned or fleet-wide, and asset checks, read from pipeline.defs, with trivial bodies
(`bench_fleet.py --floor` runs it beside the whole `analyze`).

Usage: python benchmarks/bench_dagster_events.py [--partitions 100] [--assets 12] [--metadata-kb 0]
       [--modes stock,subclass,public,public-one-plan,memory,memory-one-plan] [--shape chain|analyze_batch]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUBCLASS_COMMIT = "a8c1c43"  # the last pipeline/defs/storage.py that subclassed Dagster's storage

ONE = """
import os, sys, time
from dagster import (AssetExecutionContext, BackfillPolicy, DagsterInstance, DynamicPartitionsDefinition,
                     MaterializeResult, MetadataValue, asset, materialize)
n, mode, home, n_assets, kb = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[5]), int(sys.argv[6])
# a JSON metadata value of about `kb` KB (runs -> problem lines, as ingest's), copied onto every partition
meta = {"problems": MetadataValue.json({f"run-{i:05d}": ["x" * 180] for i in range(kb * 1024 // 200)})} if kb else {}
parts = DynamicPartitionsDefinition(name="runs")
def make(name, deps):
    @asset(name=name, deps=deps, partitions_def=parts, backfill_policy=BackfillPolicy.single_run())
    def _a(context: AssetExecutionContext):
        return MaterializeResult(metadata=meta)
    return _a
assets = [make(f"a{i}", [f"a{i - 1}"] if i else []) for i in range(n_assets)]
if sys.argv[7] == "analyze_batch":
    # the job's own graph shape: same keys, deps, partitioning and checks; nothing done in the bodies
    from dagster import AssetCheckResult, asset_check
    from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
    from pipeline.defs.assets import ASSET_CHECKS, ASSETS
    graph = AssetGraph.from_assets([*ASSETS, *ASSET_CHECKS])
    def shaped(key, deps, partitioned):
        @asset(key=key, deps=deps, partitions_def=parts if partitioned else None,
               backfill_policy=BackfillPolicy.single_run() if partitioned else None)
        def _a(context: AssetExecutionContext):
            return MaterializeResult(metadata=meta)
        return _a
    def check(check_key):
        @asset_check(asset=check_key.asset_key, name=check_key.name)
        def _c():
            return AssetCheckResult(passed=True)
        return _c
    assets = [shaped(k, list(graph.get(k).parent_keys), graph.get(k).partitions_def is not None)
              for k in graph.materializable_asset_keys]
    assets += [check(c) for c in graph.asset_check_keys]
if mode.endswith("one-plan"):
    from pipeline.defs.storage import plan_ranges_in_one_event
    plan_ranges_in_one_event()
if mode.startswith("memory"):
    instance = DagsterInstance.ephemeral()
elif mode == "subclass":
    from dagster._core.instance.ref import InstanceRef
    sys.path.insert(0, os.path.dirname(sys.argv[4]))
    from subclass_storage import event_log_override
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=event_log_override(home)))
else:
    if mode.startswith("public"):
        from pipeline.defs.storage import skip_flush_under
        skip_flush_under(home)
    instance = DagsterInstance.from_config(home)
keys = [f"r{i:05d}" for i in range(n)]
instance.add_dynamic_partitions("runs", keys)
start, cpu = time.perf_counter(), time.process_time()
materialize(assets, instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                             "dagster/asset_partition_range_end": keys[-1]},
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--assets", type=int, default=12)
    ap.add_argument("--metadata-kb", type=int, default=0, help="JSON metadata of this many KB on each asset")
    ap.add_argument("--modes", default="stock,subclass,public,public-one-plan,memory,memory-one-plan")
    ap.add_argument("--shape", choices=["chain", "analyze_batch"], default="chain",
                    help="a chain of --assets trivial assets, or the analyze_batch job's graph with trivial bodies")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[1]
    seconds = {}
    with tempfile.TemporaryDirectory() as scratch:
        subclass = Path(scratch, "subclass_storage.py")
        if "subclass" in args.modes.split(","):
            subclass.write_text(subprocess.run(["git", "show", f"{SUBCLASS_COMMIT}:pipeline/defs/storage.py"], cwd=repo,
                                               capture_output=True, text=True, check=True).stdout)
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory() as home:
                # each mode plans as it says, whatever this shell's environment sets
                env = {k: v for k, v in os.environ.items() if k != "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"}
                out = subprocess.run([sys.executable, "-c", ONE, str(args.partitions), mode, home, str(subclass),
                                      str(args.assets), str(args.metadata_kb), args.shape], env=env,
                                     cwd=repo, capture_output=True, text=True, check=True).stdout
                wall, cpu = map(float, out.strip().splitlines()[-1].split())
                seconds[mode] = wall
            shape = args.assets if args.shape == "chain" else "analyze_batch-shaped"
            print(f"{mode:15s} {args.partitions} partitions x {shape} assets, {args.metadata_kb} KB metadata: "
                  f"{wall:.1f} s wall, {cpu:.1f} CPU-s "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    if "stock" in seconds:
        for mode in seconds.keys() - {"stock"}:
            print(f"stock / {mode}: {seconds['stock'] / seconds[mode]:.1f}x")


if __name__ == "__main__":
    main()
