"""Ingest benchmark: our ingest side by side with a hand-written baseline and raw reads of the same bytes.

Builds (once, cached) a fleet of plain-text runs of at least `--total-gb` of log text, one of them a
single run of at least `--big-gb`: runs written by the simulator (`lab.simulate`), or, without it,
the real logs in ../shared/real-logs, tiled with their step numbers shifted so they keep counting up.
Then measures, each in its own subprocess (wall time, CPU time, peak RSS):

- ours: `discover_runs` + `ingest_run` into a fresh warehouse;
- baseline: `baseline_handwritten.py` (Python `re` per line -> pandas -> CSV), on the runs up to
  `--baseline-mb` of text (it needs several times its input in memory), compared by throughput;
- `wc -l` and DuckDB `read_csv` of the lines (raw read speed), DuckDB streaming the lines into Parquet,
  and DuckDB classifying them in SQL with our regexes (`duckdb_reference.py`).

With `--small-runs ARCHIVE`, only the ingest of every run of an existing archive is measured, per run
(a fleet of small runs costs per run and per file, not per byte).

Usage: python benchmarks/bench_ingest.py [--cache DIR] [--total-gb 2] [--big-gb 1] [--baseline-mb 300]
       python benchmarks/bench_ingest.py --small-runs ARCHIVE
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real-logs"
STEP_NUM = re.compile(rb"(step:|training/global_step:|\"step\":)(\d+)")
PY = sys.executable


def _shift_steps(body: bytes, offset: int) -> bytes:
    return STEP_NUM.sub(lambda m: m.group(1) + str(int(m.group(2)) + offset).encode(), body)


def _tile(src: bytes, target: int, out: Path) -> int:
    """Write `src`'s start-up once, then its body again and again with shifted steps, up to `target` bytes."""
    first = src.find(b"step:")
    cut = src.rfind(b"\n", 0, first) + 1 if first > 0 else 0
    head, body = src[:cut], src[cut:]
    if not body.endswith(b"\n"):
        body += b"\n"
    steps = [int(n) for _, n in STEP_NUM.findall(body)] or [0]
    span = max(steps) + 1
    written = 0
    with open(out, "wb") as fh:
        fh.write(head)
        written += len(head)
        k = 0
        while written < target:
            piece = _shift_steps(body, k * span) if k else body
            fh.write(piece)
            written += len(piece)
            k += 1
    return written


def _sources(scratch: Path) -> list[bytes]:
    """Train logs to tile, the first one for the big run: simulated runs (the largest completed run
    without a resume first) when the simulator exists, else the real logs."""
    try:
        from lab.simulate import simulate_fleet
    except ImportError:
        simulate_fleet = None
    if simulate_fleet is not None:
        labels = simulate_fleet(scratch, runs=16, seed=20261129, steps_scale=2.0, chatter=10)["runs"]
        logs = {rid: _entry_logs(scratch / "archive" / lab["entry"]) for rid, lab in labels.items()}
        clean = [
            rid for rid, lab in labels.items() if lab["failure_class"] == "completed" and lab["segments"] == 1
        ]
        if clean:
            big = max(clean, key=lambda rid: len(logs[rid][0]))
            rest = [
                text
                for rid, texts in sorted(logs.items())
                if rid != big
                for text in texts
                if b"step:" in text
            ]
            return [logs[big][0], *rest]
    texts = [p.read_bytes() for p in sorted(REAL_LOGS.glob("*.log"))]
    return sorted((t for t in texts if b"step:" in t), key=len, reverse=True)


def _entry_logs(entry: Path) -> list[bytes]:
    import gzip
    import tarfile

    if entry.is_dir():
        return [p.read_bytes() for p in sorted(entry.rglob("train.log"))]
    if entry.name.endswith(".tar.gz"):
        with tarfile.open(entry) as tar:
            return [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith("/train.log")]
    with gzip.open(entry) as fh:
        return [fh.read()]


def build_fleet(cache: Path, total_gb: float, big_gb: float) -> Path:
    """The cached benchmark archive (plain folders, one `train.log` each)."""
    archive = cache / f"fleet-{total_gb:g}gb-{big_gb:g}gb"
    if (archive / "manifest.json").exists():
        return archive
    shutil.rmtree(archive, ignore_errors=True)
    archive.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        sources = _sources(Path(scratch))
    sizes = {}
    big = archive / "big-run-000"
    big.mkdir()
    sizes[big.name] = _tile(sources[0], int(big_gb * 1e9), big / "train.log")
    i = 0
    while sum(sizes.values()) < total_gb * 1e9:
        i += 1
        run = archive / f"run-{i:03d}"
        run.mkdir()
        target = min(150_000_000, int(total_gb * 1e9 - sum(sizes.values())) + 1)
        sizes[run.name] = _tile(sources[i % len(sources)], target, run / "train.log")
    (archive / "manifest.json").write_text(json.dumps(sizes, indent=1))
    return archive


def measure(cmd: list[str]) -> dict:
    """Run `cmd`; its wall time, CPU time and peak RSS (MB)."""
    # output goes to files: a pipe nobody reads until the end would stall a chatty command once full
    with tempfile.TemporaryFile() as out_fh, tempfile.TemporaryFile() as err_fh:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_fh, stderr=err_fh, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out_fh.seek(0)
        err_fh.seek(0)
        out, err = out_fh.read().decode(), err_fh.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {err[-2000:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "out": out,
    }


def analysed_whole(result: dict) -> dict:
    """`result` of `verl-health analyze`, when every run was analysed; a run it lists as not analysed (a table
    that failed on it) would make the figure a measurement of less work than the benchmark names."""
    failed = [line.strip() for line in result["out"].splitlines() if line.strip().startswith("not analysed ")]
    if failed:
        raise RuntimeError("analyze left runs not analysed: " + "; ".join(failed)[:2000])
    return result


OURS = """
import sys, time
from pathlib import Path
from pipeline.ingest import discover_runs, ingest_run
root, wh, only = Path(sys.argv[1]), sys.argv[2], set(sys.argv[3:])
lines = 0
for e in discover_runs(root, quiet_period_s=0).entries:
    if not only or e.run_id in only:
        r = ingest_run(e, wh)
        lines += r.n_lines
print(lines)
"""
# the ingest loop alone (imports and discovery left out): what a fleet of small runs costs per run
SMALL_RUNS = """
import sys, time
from pipeline.ingest import discover_runs, ingest_run
entries = discover_runs(sys.argv[1], quiet_period_s=0).entries
wall, cpu = time.perf_counter(), time.process_time()
lines = size = 0
for e in entries:
    r = ingest_run(e, sys.argv[2])
    lines, size = lines + r.n_lines, size + r.n_bytes
print(len(entries), lines, size, time.perf_counter() - wall, time.process_time() - cpu)
"""
DUCKDB_TOOLS = [
    ("read", "DuckDB read_csv (lines)"),
    ("copy", "DuckDB lines -> Parquet (zstd)"),
    ("classify", "DuckDB SQL: kind, prefix, phase, ts -> Parquet"),
]


def _count_lines(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))


def _row(name: str, m: dict, n_bytes: int, n_lines: int) -> dict:
    return {
        "tool": name,
        "wall_s": m["wall"],
        "cpu_s": m["cpu"],
        "mb_s": n_bytes / 1e6 / m["wall"],
        "lines_s": n_lines / m["wall"],
        "rss_mb": m["rss_mb"],
    }


def run_scenario(
    title: str, archive: Path, runs: list[str], baseline_runs: list[str], scratch: Path
) -> list[dict]:
    """Measure every tool on `runs` (the baseline on `baseline_runs`); print a markdown table."""
    files = [str(archive / r / "train.log") for r in runs]
    n_bytes = sum(os.path.getsize(f) for f in files)
    wc = measure(["wc", "-l", *files])
    n_lines = int(wc["out"].strip().splitlines()[-1].split()[0])
    rows = [_row("wc -l", wc, n_bytes, n_lines)]
    for mode, name in DUCKDB_TOOLS:
        m = measure(
            [
                PY,
                str(REPO / "benchmarks" / "duckdb_reference.py"),
                mode,
                str(scratch / "lines.parquet"),
                *files,
            ]
        )
        rows.append(_row(name, m, n_bytes, int(m["out"].split()[-1])))
        (scratch / "lines.parquet").unlink(missing_ok=True)
    wh = scratch / f"wh-{title.split()[0]}"
    shutil.rmtree(wh, ignore_errors=True)
    ours = measure([PY, "-c", OURS, str(archive), str(wh), *runs])
    rows.append(_row("verl-health ingest", ours, n_bytes, int(ours["out"].split()[-1])))
    if baseline_runs:
        bfiles = [str(archive / r / "train.log") for r in baseline_runs]
        b_bytes = sum(os.path.getsize(f) for f in bfiles)
        b_lines = sum(_count_lines(f) for f in bfiles)
        base = measure(
            [PY, str(REPO / "benchmarks" / "baseline_handwritten.py"), str(scratch / "csv"), *bfiles]
        )
        rows.append(_row(f"hand-written baseline ({b_bytes / 1e6:.0f} MB)", base, b_bytes, b_lines))
    print(f"\n### {title}: {len(runs)} run(s), {n_bytes / 1e9:.2f} GB, {n_lines:,} lines\n")
    print("| tool | wall s | CPU s | MB/s | lines/s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['tool']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['mb_s']:.0f} | {r['lines_s']:,.0f} | {r['rss_mb']:.0f} |"
        )
    by = {r["tool"]: r for r in rows}
    ours_row = by["verl-health ingest"]

    def slower(tool: str) -> float:
        return ours_row["wall_s"] / by[tool]["wall_s"]

    print(
        f"\nOur ingest takes {slower('DuckDB read_csv (lines)'):.1f}x the time of DuckDB's raw read (target: <= 3x), "
        f"{slower('DuckDB lines -> Parquet (zstd)'):.1f}x that of DuckDB writing the bare lines to Parquet, and "
        f"{slower('DuckDB SQL: kind, prefix, phase, ts -> Parquet'):.1f}x that of DuckDB classifying them in SQL."
    )
    print(f"Peak RSS of our ingest: {ours_row['rss_mb']:.0f} MB (target: < 1024 MB for the 1 GB run).")
    if baseline_runs:
        print(
            f"Our ingest is {ours_row['mb_s'] / rows[-1]['mb_s']:.1f}x the hand-written baseline's MB/s (target: >= 10x)."
        )
    return rows


def small_runs_scenario(archive: Path, scratch: Path) -> None:
    """Ingest every run of `archive` (folders, .tar.gz, .log.gz as they are); print the cost per run."""
    m = measure([PY, "-c", SMALL_RUNS, str(archive), str(scratch / "wh-small")])
    n_runs, n_lines, n_bytes, wall, cpu = m["out"].split()
    n_runs, wall, cpu = int(n_runs), float(wall), float(cpu)
    print(f"\n### Many small runs: {archive}\n")
    print("| runs | lines | MB | ingest wall s | ingest CPU s | ms per run (wall) | ms per run (CPU) | peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {n_runs} | {int(n_lines):,} | {int(n_bytes) / 1e6:.1f} | {wall:.2f} | {cpu:.2f} | "
          f"{1000 * wall / n_runs:.0f} | {1000 * cpu / n_runs:.0f} | {m['rss_mb']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "verl-health-bench")
    parser.add_argument("--total-gb", type=float, default=2.0)
    parser.add_argument("--big-gb", type=float, default=1.0)
    parser.add_argument("--baseline-mb", type=float, default=300.0)
    parser.add_argument("--small-runs", type=Path, metavar="ARCHIVE",
                        help="only measure the ingest of every run of ARCHIVE (e.g. `verl-health simulate "
                             "--runs 100 --seed 11`'s), per run")
    args = parser.parse_args()
    if args.small_runs:
        with tempfile.TemporaryDirectory() as scratch:
            small_runs_scenario(args.small_runs, Path(scratch))
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    archive = build_fleet(args.cache, args.total_gb, args.big_gb)
    sizes = json.loads((archive / "manifest.json").read_text())
    runs = sorted(sizes)
    small = sorted((r for r in runs if r != "big-run-000"), key=lambda r: sizes[r])
    baseline_runs, total = [], 0
    for r in small:
        if total + sizes[r] <= args.baseline_mb * 1e6:
            baseline_runs.append(r)
            total += sizes[r]
    with tempfile.TemporaryDirectory(dir=args.cache) as scratch:
        run_scenario("Single run", archive, ["big-run-000"], [], Path(scratch))
        run_scenario("Whole fleet", archive, runs, baseline_runs, Path(scratch))


if __name__ == "__main__":
    main()
