"""Benchmark the derive layer: all per-run and fleet tables for a simulated fleet, next to its ingest time.

Simulates the fleet, ingests every run (timed), derives every table in one call each (timed), scores
run_summary against labels.json, and prints a side-by-side table.
Usage: python benchmarks/bench_derive.py [--runs 1000] [--seed 7] [--keep DIR]

`--warehouse W --baseline REV` instead times the derive code of git revision REV side by side with this
working tree's, on copies of the analysed warehouse W (every run of it), in alternating subprocesses:
`--mode assets` each derive asset's body as pipeline/defs/assets/derive.py runs it (a table's derive call, its
contract check, step_phases' phase-sum check; a fleet table's catalog refresh), `--mode batch`
derive_run_tables and derive_fleet_tables. It prints the median wall and CPU seconds (DuckDB's threads
included) per step, the same less the per-run SQL's own COPY (the fixed cost of a step: views, row counts,
swaps, checks; the trees compared must both have derive._write_query) and the load average, and checks that both wrote the same rows in the same order in
every derived table (floats to 12 significant digits: DuckDB's parallel sums differ in the last bit from
one run to the next).
Usage: python benchmarks/bench_derive.py --warehouse /tmp/bf/keep/simulated-100/warehouse --baseline e1931a2
       [--mode assets|batch] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if "--child" not in sys.argv:  # a child imports the pipeline of the tree it is given
    sys.path.insert(0, str(REPO))


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def bench(root: Path, runs: int, seed: int) -> dict:
    """Simulate, ingest and derive `runs` runs under `root`; return the timings and accuracy."""
    from lab.simulate import simulate_fleet
    from pipeline import derive
    from pipeline.ingest import discover_runs, ingest_run
    from pipeline.lake import connect

    labels, t_sim = _timed(lambda: simulate_fleet(root, runs=runs, seed=seed))
    warehouse = root / "warehouse"
    found = discover_runs(root / "archive", quiet_period_s=0, now=time.time() + 10**7)

    def ingest_all():
        for entry in found.entries:
            ingest_run(entry, warehouse)

    _, t_ingest = _timed(ingest_all)
    run_ids = [e.run_id for e in found.entries]
    run_rows, t_run = _timed(lambda: derive.derive_run_tables(warehouse, run_ids))
    fleet_rows, t_fleet = _timed(lambda: derive.derive_fleet_tables(warehouse))
    con = connect(warehouse)
    pred = dict(con.execute("select run_id, failure_class from run_summary").fetchall())
    right = sum(pred.get(r) == lab["failure_class"] for r, lab in labels["runs"].items())
    lines, metrics = (
        con.execute(f"select count(*) from {t}").fetchone()[0] for t in ("log_lines", "step_metrics")
    )
    return {
        "runs": len(run_ids),
        "log_lines": lines,
        "step_metric_values": metrics,
        "simulate_s": t_sim,
        "ingest_s": t_ingest,
        "derive_run_tables_s": t_run,
        "derive_fleet_tables_s": t_fleet,
        "rows": {**run_rows, **fleet_rows},
        "failure_class_accuracy": right / max(len(labels["runs"]), 1),
    }


def _child(code: str, warehouse: str, mode: str) -> dict[str, tuple[float, float]]:
    """In a subprocess: the wall and CPU seconds of each step with the pipeline of the tree `code`."""
    sys.path.insert(0, code)
    import pandas  # noqa: F401 - loaded in the Dagster process (pipeline.defs.definitions) before any step

    from pipeline import derive, lake
    from pipeline.quality import contract_violations, phase_sums_consistent

    wh = Path(warehouse)
    run_ids = sorted(p.name.split("=", 1)[1] for p in lake.table_dir(wh, "runs").glob("run_id=*"))

    def run_table(name):
        derive.derive_run_table(wh, name, run_ids)
        contract_violations(wh, name, run_ids)
        if name == "step_phases":
            phase_sums_consistent(wh, run_ids)

    def fleet_table(name):
        derive.derive_fleet_table(wh, name)
        lake.refresh_catalog(wh)
        contract_violations(wh, name, None)

    if mode == "assets":
        steps = {name: (lambda n=name: run_table(n)) for name in derive.RUN_TABLES}
        steps.update({name: (lambda n=name: fleet_table(n)) for name in derive.FLEET_TABLES})
    else:
        steps = {"derive_run_tables": lambda: derive.derive_run_tables(wh, run_ids),
                 "derive_fleet_tables": lambda: derive.derive_fleet_tables(wh)}
    in_query = [0.0, 0.0]
    write_query = derive._write_query

    def timed_query(*args, **kwargs):  # the per-run tables' SQL, run and written by DuckDB
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return write_query(*args, **kwargs)
        finally:
            in_query[0] += time.perf_counter() - wall
            in_query[1] += time.process_time() - cpu

    derive._write_query = timed_query
    out = {}
    for name, step in steps.items():
        in_query[:] = [0.0, 0.0]
        cpu, wall = time.process_time(), time.perf_counter()
        step()
        out[name] = (time.perf_counter() - wall, time.process_time() - cpu, *in_query)
    return out


def _tree(rev: str | None, into: Path) -> Path:
    """The pipeline and sql folders of git revision `rev` (None: this working tree; a folder: that tree)."""
    if rev is None:
        return REPO
    if Path(rev).is_dir():
        return Path(rev).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "pipeline", "sql"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _rows(warehouse: Path) -> dict[str, list]:
    """Every derived table's rows per file, in file order (floats to 12 significant digits)."""
    import pyarrow.parquet as pq

    def norm(v):
        if isinstance(v, float):
            return f"{v:.12g}"
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    files = sorted(p.relative_to(warehouse) for p in warehouse.glob("*/run_id=*/*.parquet"))
    files += sorted(p.relative_to(warehouse) for p in warehouse.glob("*.parquet"))
    return {str(f): [norm(r) for r in pq.read_table(warehouse / f).to_pylist()] for f in files}


def side_by_side(warehouse: Path, baseline: str, ours: str | None, mode: str, rounds: int) -> int:
    """Time the derive steps of `baseline` and `ours` on copies of `warehouse`, alternated; compare their rows."""
    with tempfile.TemporaryDirectory(prefix="bench_derive_") as tmp:
        trees = {"baseline": _tree(baseline, Path(tmp, "baseline")), "ours": _tree(ours, Path(tmp, "ours"))}
        times: dict[str, list[dict]] = {v: [] for v in trees}
        loads = []
        for r in range(rounds):
            for variant in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                copy = Path(tmp, f"wh-{variant}")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(warehouse, copy)
                loads.append(os.getloadavg()[0])
                done = subprocess.run([sys.executable, __file__, "--child", str(trees[variant]), str(copy), mode],
                                      check=True, capture_output=True, text=True, cwd=tmp)
                times[variant].append(json.loads(done.stdout.splitlines()[-1]))
        same = _rows(Path(tmp, "wh-baseline")) == _rows(Path(tmp, "wh-ours"))

    def median(variant, step, i):
        values = sorted(t[step][i] for t in times[variant])
        return values[len(values) // 2]

    print(f"{mode}: {baseline} vs {ours or 'working tree'}, median of {rounds} rounds, "
          f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")
    print("wall / CPU seconds; 'outside SQL': the step less the per-run SQL's COPY (its query and write)")
    print(f"{'step':<22}{'baseline':>15}{'ours':>15}{'wall ratio':>12}{'CPU ratio':>11}"
          f"{'outside SQL: baseline':>24}{'ours':>15}")
    steps = list(times["baseline"][0])
    rows = [(s, [median("baseline", s, i) for i in range(4)], [median("ours", s, i) for i in range(4)])
            for s in steps]
    rows.append(("total", *([sum(r[k][i] for r in rows) for i in range(4)] for k in (1, 2))))
    for step, (bw, bc, bqw, bqc), (ow, oc, oqw, oqc) in rows:
        print(f"{step:<22}{bw:>8.2f} /{bc:>5.2f}{ow:>9.2f} /{oc:>5.2f}{ow / bw:>12.2f}{oc / bc:>11.2f}"
              f"{bw - bqw:>17.2f} /{bc - bqc:>5.2f}{ow - oqw:>9.2f} /{oc - oqc:>5.2f}")
    print("every derived table row for row:", "identical" if same else "DIFFERENT")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the timings side by side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it")
    ap.add_argument("--warehouse", type=Path, help="time the derive steps on copies of this analysed warehouse")
    ap.add_argument("--baseline", help="with --warehouse: the git revision (or code folder) to compare with")
    ap.add_argument("--ours", help="with --warehouse: a git revision (or code folder) instead of the working tree")
    ap.add_argument("--mode", choices=("assets", "batch"), default="assets")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0
    if args.warehouse:
        if not args.baseline:
            ap.error("--warehouse needs --baseline")
        return side_by_side(args.warehouse, args.baseline, args.ours, args.mode, args.rounds)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = bench(args.keep, args.runs, args.seed)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_derive_") as tmp:
            result = bench(Path(tmp), args.runs, args.seed)
    derive_s = result["derive_run_tables_s"] + result["derive_fleet_tables_s"]
    print(
        f"fleet: {result['runs']} runs, {result['log_lines']:,} log lines, "
        f"{result['step_metric_values']:,} metric values"
    )
    print(f"{'stage':<28}{'seconds':>10}{'ms/run':>10}")
    for label, secs in (
        ("simulate", result["simulate_s"]),
        ("ingest", result["ingest_s"]),
        ("derive per-run tables", result["derive_run_tables_s"]),
        ("derive fleet tables", result["derive_fleet_tables_s"]),
        ("derive total", derive_s),
    ):
        print(f"{label:<28}{secs:>10.2f}{1000 * secs / max(result['runs'], 1):>10.1f}")
    print(f"derive / ingest time: {derive_s / result['ingest_s']:.2f}")
    print(f"failure_class accuracy vs labels.json: {result['failure_class_accuracy']:.4f}")
    print(json.dumps(result["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
