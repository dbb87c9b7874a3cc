"""The whole `verl-health analyze` of a fleet of runs, side by side with the hand-written parse of its logs.

Issue #14's fleet target: `analyze` of a simulated fleet (`verl-health simulate --runs 100 --seed 11`),
every report included, within 3x of the hand-written parse (`baseline_handwritten.py`: Python `re` per line
-> pandas -> CSV) of the same logs. The baseline reads plain files, so every file of every run (train log,
Ray worker logs, metrics JSONL, W&B files; `.tar.gz` members and `.gz` bodies unpacked) is first written out
as plain text, untimed: the baseline gets the same bytes without paying for the archive formats.

Each scenario runs `analyze` into a fresh warehouse and Dagster home, then the hand-written parse, the
minimal parse of the step metrics alone (`baseline_minimal.py`) and DuckDB's `read_csv` of the same lines, each in its own subprocess (wall, CPU, peak RSS), and prints the
ratios and the load average. `--real-copies N` adds the real-log fleet of `bench_real.py` (each shared log
N times, 230 runs for N=10).

`--dagster-in-memory` adds the same analysis recorded in Dagster's in-memory instance instead of the command
line's SQLite home: what that record costs.

`--one-more` measures what a launch script's last line waits for: the fleet but its last run is analysed
(untimed), then `analyze --run` of that last run into the same warehouse, beside both parses of its files.

`--floor` adds, in the same run, Dagster's bare record of the same batch (issue #28): one run of a job of the
`analyze_batch` graph's shape with trivial bodies over as many partitions, in the command line's instance kind
(`bench_dagster_events.py --shape analyze_batch --modes public-one-plan`), the pipeline's own work as analyze
minus that floor, and the ratio analyze / floor.

Usage: python benchmarks/bench_fleet.py [--runs 100] [--seed 11] [--real-copies 0] [--repeat 1] [--keep DIR]
       [--dagster-in-memory] [--one-more] [--floor]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from bench_ingest import PY, REPO, analysed_whole, measure
from bench_real import DUCKDB_READ
from bench_real import build_fleet as build_real_fleet

# the command line of the checkout this script is in (a git worktree too), not the venv's installed one
VERL_HEALTH = [PY, "-m", "pipeline.cli"]
# the same analysis recorded in Dagster's in-memory instance: what the command line's SQLite record costs
ANALYZE_IN_MEMORY = ("import sys; from pipeline.defs.analysis import analyze_archive; "
                     "analyze_archive(sys.argv[1], sys.argv[2], sys.argv[3])")


def simulated_fleet(cache: Path, runs: int, seed: int) -> Path:
    """`verl-health simulate --runs N --seed S` into the cache (the simulator's bytes depend only on both)."""
    out = cache / f"sim-{runs}-seed{seed}"
    if not (out / "labels.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([*VERL_HEALTH, "simulate", "--runs", str(runs), "--seed", str(seed), str(out)],
                       check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return out / "archive"


def plain_logs(archive: Path, out: Path) -> list[Path]:
    """Every file of every run in `archive` as a plain file under `out` (archives and gzip unpacked)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, data: bytes) -> None:
        target = out / name.replace("/", "__")
        target.write_bytes(data)
        written.append(target)

    for entry in sorted(archive.iterdir()):
        if entry.is_dir():
            for path in sorted(p for p in entry.rglob("*") if p.is_file()):
                put(str(path.relative_to(archive)), path.read_bytes())
        elif entry.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(entry) as tar:
                for member in tar.getmembers():
                    if member.isfile():
                        put(member.name, tar.extractfile(member).read())
        elif entry.name.endswith(".gz"):
            with gzip.open(entry) as fh:
                put(entry.name[: -len(".gz")], fh.read())
        elif entry.is_file():
            put(entry.name, entry.read_bytes())
    return written


def dagster_floor(partitions: int) -> tuple[float, float]:
    """Wall and CPU seconds of Dagster's bare record of an `analyze_batch`-shaped run over `partitions`."""
    out = subprocess.run([PY, str(REPO / "benchmarks" / "bench_dagster_events.py"), "--partitions", str(partitions),
                          "--shape", "analyze_batch", "--modes", "public-one-plan"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    words = out.split()
    return float(words[words.index("wall,") - 2]), float(words[words.index("CPU-s") - 1])


def scenario(name: str, archive: Path, files: list[Path], scratch: Path, again: bool = False,
             in_memory: bool = False, floor: bool = False) -> dict:
    """`analyze` (fresh warehouse and Dagster home), the hand-written parse and DuckDB's read, with ratios;
    with `again`, `analyze` once more on the same warehouse (a night with every run unchanged); with
    `in_memory`, the same analysis into another fresh warehouse with Dagster's in-memory instance."""
    work = scratch / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    load_before = os.getloadavg()[0]
    analyze = [*VERL_HEALTH, "analyze", str(archive), "--warehouse", str(work / "warehouse"),
               "--reports", str(work / "reports")]
    ours = analysed_whole(measure(analyze))
    hand = measure([PY, str(REPO / "benchmarks" / "baseline_handwritten.py"), str(work / "csv"), *map(str, files)])
    minimal = measure([PY, str(REPO / "benchmarks" / "baseline_minimal.py"), str(work / "csv-min"), *map(str, files)])
    duck = measure([PY, "-c", DUCKDB_READ, *map(str, files)])
    reports = len(list((work / "reports").glob("runs/*.html")))
    row = {"scenario": name, "runs": len(list(archive.iterdir())), "run reports": reports, "files": len(files),
           "MB": round(sum(f.stat().st_size for f in files) / 2**20, 1)}
    for label, m in (("analyze", ours), ("hand-written", hand), ("minimal parse", minimal), ("duckdb read", duck)):
        row[f"{label} wall s / CPU s / MB RSS"] = f"{m['wall']:.1f} / {m['cpu']:.1f} / {m['rss_mb']:.0f}"
    row["analyze time over hand-written (wall)"] = round(ours["wall"] / hand["wall"], 2)
    row["analyze time over hand-written (CPU)"] = round(ours["cpu"] / hand["cpu"], 2)
    row["analyze time over minimal parse (wall)"] = round(ours["wall"] / minimal["wall"], 2)
    row["analyze time over minimal parse (CPU)"] = round(ours["cpu"] / minimal["cpu"], 2)
    row["analyze time over duckdb read (wall)"] = round(ours["wall"] / duck["wall"], 1)
    row["load average (1 min) before / after"] = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    if again:
        same = measure(analyze)
        row["analyze again, nothing changed: wall s / CPU s"] = f"{same['wall']:.1f} / {same['cpu']:.1f}"
    if in_memory:
        memory = measure([PY, "-c", ANALYZE_IN_MEMORY, str(archive), str(work / "warehouse-in-memory"),
                          str(work / "reports-in-memory")])
        row["analyze, Dagster in memory: wall / CPU / RSS"] = (
            f"{memory['wall']:.1f} / {memory['cpu']:.1f} / {memory['rss_mb']:.0f}")
        row["the same over hand-written (wall / CPU)"] = (
            f"{memory['wall'] / hand['wall']:.2f} / {memory['cpu'] / hand['cpu']:.2f}")
    if floor:
        wall, cpu = dagster_floor(row["runs"])
        row["Dagster floor (same graph, no work): wall / CPU"] = f"{wall:.1f} / {cpu:.1f}"
        row["pipeline's own work (analyze - floor, wall)"] = round(ours["wall"] - wall, 1)
        row["analyze over Dagster floor (wall)"] = round(ours["wall"] / wall, 2)
        row["load average (1 min) after floor"] = f"{os.getloadavg()[0]:.1f}"
    shutil.rmtree(work / "csv", ignore_errors=True)
    shutil.rmtree(work / "csv-min", ignore_errors=True)
    return row


def one_more(name: str, archive: Path, scratch: Path) -> dict:
    """`analyze --run` of the archive's last run into a warehouse holding every other run, beside the
    hand-written and the minimal parse of that run's files."""
    work = scratch / f"{name}-one-more"
    shutil.rmtree(work, ignore_errors=True)
    entries = sorted(archive.iterdir())
    fleet, new = work / "fleet", work / "new"
    fleet.mkdir(parents=True)
    new.mkdir()
    for entry in entries[:-1]:  # hard links: the same bytes and times, no copy
        if entry.is_dir():
            shutil.copytree(entry, fleet / entry.name, copy_function=os.link)
        else:
            os.link(entry, fleet / entry.name)
    held = entries[-1]
    (shutil.copytree(held, new / held.name) if held.is_dir() else shutil.copy2(held, new / held.name))
    where = ["--warehouse", str(work / "warehouse"), "--reports", str(work / "reports")]
    measure([*VERL_HEALTH, "analyze", str(fleet), *where])
    files = plain_logs(new, work / "plain")
    load_before = os.getloadavg()[0]
    ours = measure([*VERL_HEALTH, "analyze", "--run", str(new / held.name), *where])
    hand = measure([PY, str(REPO / "benchmarks" / "baseline_handwritten.py"), str(work / "csv"), *map(str, files)])
    minimal = measure([PY, str(REPO / "benchmarks" / "baseline_minimal.py"), str(work / "csv-min"), *map(str, files)])
    row = {"scenario": f"{name}: analyze --run of 1 new run into {len(entries) - 1}", "files": len(files),
           "MB": round(sum(f.stat().st_size for f in files) / 2**20, 2)}
    for label, m in (("analyze --run", ours), ("hand-written", hand), ("minimal parse", minimal)):
        row[f"{label} wall s / CPU s / MB RSS"] = f"{m['wall']:.2f} / {m['cpu']:.2f} / {m['rss_mb']:.0f}"
    row["analyze --run time over hand-written (wall)"] = round(ours["wall"] / hand["wall"], 2)
    row["analyze --run time over minimal parse (wall)"] = round(ours["wall"] / minimal["wall"], 2)
    row["load average (1 min) before / after"] = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "verl-health-bench-fleet")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--real-copies", type=int, default=0, help="also the real-log fleet, each log N times")
    ap.add_argument("--repeat", type=int, default=1, help="measure each scenario this many times")
    ap.add_argument("--again", action="store_true", help="then analyze again with every run unchanged")
    ap.add_argument("--keep", type=Path, help="work folder to keep (warehouse, reports)")
    ap.add_argument("--dagster-in-memory", action="store_true",
                    help="also analyze with Dagster's in-memory instance (what the SQLite record costs)")
    ap.add_argument("--one-more", action="store_true",
                    help="only `analyze --run` of the last run into a warehouse of all the others")
    ap.add_argument("--floor", action="store_true",
                    help="also Dagster's bare record of the same graph shape and batch, and analyze over it")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    archives = [(f"simulated-{args.runs}", simulated_fleet(args.cache, args.runs, args.seed))]
    if args.real_copies:
        archives.append((f"real-{args.real_copies}x", build_real_fleet(args.cache, args.real_copies)))
    scratch = args.keep or Path(tempfile.mkdtemp(dir=args.cache))
    try:
        for name, archive in archives:
            if args.one_more:
                row = one_more(name, archive, scratch)
                print("\n".join(f"{key:46s} {v}" for key, v in row.items()), "\n", flush=True)
                continue
            files = plain_logs(archive, scratch / f"{name}-plain")
            for _ in range(args.repeat):
                row = scenario(name, archive, files, scratch, args.again, args.dagster_in_memory, args.floor)
                print("\n".join(f"{key:40s} {v}" for key, v in row.items()), "\n", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
