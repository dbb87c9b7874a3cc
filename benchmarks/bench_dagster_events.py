"""Dagster's bookkeeping alone for a batch of runs: one Dagster run over N partitions of 8 trivial
single-run-backfill assets, recorded in Dagster's stock SQLite event log and in the command line's
(`pipeline.dagster_storage`: one pooled engine per database, no disk flush per event).

Each mode runs in its own subprocess with a fresh instance folder; prints both times and their ratio.

Usage: python benchmarks/bench_dagster_events.py [--partitions 100]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ONE = """
import sys, time
from dagster import AssetExecutionContext, BackfillPolicy, DagsterInstance, DynamicPartitionsDefinition, asset, materialize
from dagster._core.instance.ref import InstanceRef
from pipeline.dagster_storage import event_log_override
n, mode, home = int(sys.argv[1]), sys.argv[2], sys.argv[3]
parts = DynamicPartitionsDefinition(name="runs")
def make(name, deps):
    @asset(name=name, deps=deps, partitions_def=parts, backfill_policy=BackfillPolicy.single_run())
    def _a(context: AssetExecutionContext) -> None:
        return None
    return _a
assets = [make(f"a{i}", [f"a{i - 1}"] if i else []) for i in range(8)]
if mode == "unflushed":
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides=event_log_override(home)))
else:
    instance = DagsterInstance.from_config(home)
keys = [f"r{i:05d}" for i in range(n)]
instance.add_dynamic_partitions("runs", keys)
start = time.perf_counter()
materialize(assets, instance=instance, tags={"dagster/asset_partition_range_start": keys[0],
                                             "dagster/asset_partition_range_end": keys[-1]},
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
print(time.perf_counter() - start)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=100)
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[1]
    seconds = {}
    for mode in ("stock", "unflushed"):
        with tempfile.TemporaryDirectory() as home:
            out = subprocess.run([sys.executable, "-c", ONE, str(args.partitions), mode, home], cwd=repo,
                                 capture_output=True, text=True, check=True).stdout
            seconds[mode] = float(out.strip().splitlines()[-1])
        print(f"{mode:10s} {args.partitions} partitions x 8 assets: {seconds[mode]:.1f} s "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    print(f"stock / unflushed: {seconds['stock'] / seconds['unflushed']:.1f}x")


if __name__ == "__main__":
    main()
