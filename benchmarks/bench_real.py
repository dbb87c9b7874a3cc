"""The whole `verl-health analyze` on real verl logs, side by side with the hand-written parse and DuckDB.

Real logs cost more per MB than simulated ones (long generation printouts, config dumps, ANSI colour,
many start-ups), so this benchmark builds its input from ../shared/real-logs:

- **big run**: every shared real log concatenated, again and again, into one run of `--big-mb` MB;
- **fleet**: every shared real log as its own run, `--copies` times over (each copy a run).

For each it measures, in their own subprocesses: `verl-health analyze` end to end (ingest, derive, detect,
every report; wall time, CPU time, peak RSS), the seed article's hand-written parse
(`baseline_handwritten.py`: Python `re` per line -> pandas -> CSV, every line kept), the minimal parse of the
step metrics alone (`baseline_minimal.py`: `re` per step line -> pandas -> CSV) and DuckDB's `read_csv` of their
lines. It prints each figure and the ratios against both parses.

Usage: python benchmarks/bench_real.py [--cache DIR] [--big-mb 300] [--copies 10] [--only big|fleet]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_ingest import PY, REAL_LOGS, REPO, analysed_whole, measure

DUCKDB_READ = """
import sys, duckdb
files = sys.argv[1:]
n = duckdb.execute("select count(*) from read_csv($files, columns={'line': 'VARCHAR'}, delim=chr(1), quote='', "
                   "escape='', header=false, strict_mode=false, ignore_errors=true)", {"files": files}).fetchone()[0]
print(n)
"""


def _logs() -> list[Path]:
    logs = sorted(REAL_LOGS.glob("*.log"))
    if not logs:
        sys.exit(f"no real logs in {REAL_LOGS}: this benchmark needs ../shared beside the clone")
    return logs


def build_big_run(cache: Path, megabytes: int) -> Path:
    """An archive holding one run: the real logs concatenated until `megabytes` MB (cached)."""
    archive = cache / f"big-{megabytes}mb"
    target = archive / "real-big.log"
    if not target.is_file():
        archive.mkdir(parents=True, exist_ok=True)
        pieces = [p.read_bytes() for p in _logs()]
        written = 0
        with open(target, "wb") as fh:
            while written < megabytes * 2**20:
                for piece in pieces:
                    piece = piece if piece.endswith(b"\n") else piece + b"\n"
                    fh.write(piece)
                    written += len(piece)
    return archive


def build_fleet(cache: Path, copies: int) -> Path:
    """An archive of `copies` runs per real log (cached)."""
    archive = cache / f"fleet-{copies}x"
    if not archive.is_dir():
        archive.mkdir(parents=True)
        for k in range(copies):
            for log in _logs():
                shutil.copyfile(log, archive / f"{log.stem}-copy{k:03d}.log")
    return archive


def scenario(name: str, archive: Path, scratch: Path) -> dict:
    """analyze, the hand-written parse and DuckDB's read of the same files, with their ratios."""
    files = [str(p) for p in sorted(archive.glob("*.log"))]
    size_mb = sum(Path(f).stat().st_size for f in files) / 2**20
    load_before = os.getloadavg()[0]
    ours = analysed_whole(measure([str(REPO / ".venv" / "bin" / "verl-health"), "analyze", str(archive),
                                   "--warehouse", str(scratch / f"{name}-wh"), "--reports", str(scratch / f"{name}-rep")]))
    hand = measure([PY, str(REPO / "benchmarks" / "baseline_handwritten.py"), str(scratch / f"{name}-csv"), *files])
    minimal = measure([PY, str(REPO / "benchmarks" / "baseline_minimal.py"), str(scratch / f"{name}-min"), *files])
    duck = measure([PY, "-c", DUCKDB_READ, *files])
    row = {"scenario": name, "files": len(files), "MB": round(size_mb, 1)}
    for label, m in (("analyze", ours), ("hand-written", hand), ("minimal parse", minimal), ("duckdb read", duck)):
        row[f"{label} s"] = round(m["wall"], 1)
        row[f"{label} cpu s"] = round(m["cpu"], 1)
        row[f"{label} MB RSS"] = round(m["rss_mb"])
    row["analyze speed vs hand-written"] = round(hand["wall"] / ours["wall"], 2)
    row["analyze speed vs minimal parse"] = round(minimal["wall"] / ours["wall"], 2)
    row["analyze time over duckdb read"] = round(ours["wall"] / duck["wall"], 1)
    # the machine may be shared: the ratios are measured under the same load, the seconds are not comparable
    row["load average (1 min) before / after"] = f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "verl-health-bench-real")
    ap.add_argument("--big-mb", type=int, default=300)
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--only", choices=("big", "fleet"), help="measure one scenario only")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.cache) as scratch:
        scenarios = {"big": ("big run", lambda: build_big_run(args.cache, args.big_mb)),
                     "fleet": ("fleet", lambda: build_fleet(args.cache, args.copies))}
        for key, (name, build) in scenarios.items():
            if args.only not in (None, key):
                continue
            archive = build()
            row = scenario(name.replace(" ", "-"), archive, Path(scratch))
            print("\n".join(f"{k:34s} {v}" for k, v in row.items()), "\n", flush=True)


if __name__ == "__main__":
    main()
