"""Concurrent writers corrupt nothing: forced interleavings of two rewrites of one run, two processes
rewriting it, two materialisations over overlapping runs (every partition equals a single run's), and two
rebuilds of a fleet table by runs side by side (the last write has every run)."""

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from operate_support import ROOT, simulate, write_run

from pipeline import derive, lake
from pipeline.defs.analysis import analyze_archive
from pipeline.tables import per_run_tables, with_inputs

TABLES = list(with_inputs("run_summary", "config_findings"))
VOLATILE = {"ingested_at"}
WORKER = """
import sys
from dagster import DagsterInstance, materialize
from pipeline import derive, lake
from pipeline.defs.analysis import analyze_archive
from pipeline.tables import per_run_tables
from pipeline.defs.partitions import partition_tags
from pipeline.defs.definitions import build_definitions
from pipeline.incremental import REINGEST_TAG
archive, warehouse, reports, rounds, *run_ids = sys.argv[1:]
defs = build_definitions(archive, warehouse, reports, quiet_period_s=0)
instance = DagsterInstance.ephemeral()
instance.add_dynamic_partitions("run_id", run_ids)
for _ in range(int(rounds)):
    result = materialize(list(defs.assets), instance=instance, resources=defs.resources, selection={tables},
                         tags={{**partition_tags(run_ids), REINGEST_TAG: "true"}})
    assert result.success
    lake.refresh_catalog(warehouse)
"""


SWAPPER = """
import sys
import pyarrow as pa
from pipeline import derive, lake
from pipeline.defs.analysis import analyze_archive
from pipeline.tables import per_run_tables
warehouse, tag = sys.argv[1:]
data = pa.table({"x": list(range(2000)), "writer": [tag] * 2000})
for _ in range(150):
    lake.write_run_table(warehouse, "log_lines", "run-a", data)
"""


class Lockstep:
    """Forces two writers of one partition together: both reach the partition lock at the same moment,
    then each rename waits (up to 1 s) for the other writer's, so two unguarded swaps always collide."""

    def __init__(self, real_lock):
        self.real_lock = real_lock
        self.at_lock = threading.Barrier(2, timeout=30)
        self.at_rename = threading.Barrier(2, timeout=1.0)

    @contextlib.contextmanager
    def lock(self, final_dir):
        self.at_lock.wait()
        with self.real_lock(final_dir):
            yield

    def rename(self, src, dst):
        with contextlib.suppress(threading.BrokenBarrierError):
            self.at_rename.wait()
        os.rename(src, dst)


def test_the_partition_lock_serialises_two_swaps(tmp_path, monkeypatch):
    """Two rewrites of one run with their renames forced into lockstep: the partition lock makes one
    wait for the other, so both succeed, one writer's rows are kept whole, and nothing is left over."""
    lake.write_run_table(tmp_path, "log_lines", "run-a", pa.table({"writer": ["before"] * 3}))
    lockstep = Lockstep(lake._partition_lock)
    monkeypatch.setattr(lake, "_partition_lock", lockstep.lock)
    monkeypatch.setattr(lake, "_exchange", lambda a, b: False)  # the two-rename path, where the lock matters
    monkeypatch.setattr(lake, "os", SimpleNamespace(rename=lockstep.rename, replace=os.replace))
    errors = []

    def rewrite(tag):
        try:
            lake.write_run_table(tmp_path, "log_lines", "run-a", pa.table({"writer": [tag] * 3}))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows what failed
            errors.append(exc)

    writers = [threading.Thread(target=rewrite, args=(tag,)) for tag in "AB"]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=30)
    assert errors == []
    assert sorted(p.name for p in lake.table_dir(tmp_path, "log_lines").iterdir()) == [".locks", "run_id=run-a"]
    [part] = lake.run_partition_dir(tmp_path, "log_lines", "run-a").iterdir()
    assert pq.read_table(part).column("writer").to_pylist() in (["A"] * 3, ["B"] * 3)


def test_a_reader_never_sees_a_partition_missing(tmp_path):
    """While one run is rewritten 300 times, a reader listing and reading it through `table_source`
    always finds it whole: the swap leaves no moment without the partition (two renames would)."""
    lake.write_run_table(tmp_path, "log_lines", "run-a", pa.table({"x": list(range(500))}))
    done = threading.Event()
    failures = []

    def read():
        con = duckdb.connect()
        while not done.is_set():
            try:
                src = lake.table_source(tmp_path, "log_lines", ["run-a"])
                assert src is not None, "partition listed as missing"
                assert con.execute(f"select count(*) from {src}").fetchone()[0] == 500
            except Exception as exc:  # noqa: BLE001 - collected and shown by the assertion below
                failures.append(repr(exc))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(300):
            lake.write_run_table(tmp_path, "log_lines", "run-a", pa.table({"x": list(range(500))}))
    finally:
        done.set()
        reader.join(timeout=60)
    assert failures == []


def test_two_writers_of_one_partition(tmp_path):
    """Rewrites of the same run from two processes never fail, never mix, and leave no debris."""
    procs = [subprocess.Popen([sys.executable, "-c", SWAPPER, str(tmp_path), tag], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for tag in "AB"]
    for proc in procs:
        _finish(proc, timeout_s=300)
    assert sorted(p.name for p in lake.table_dir(tmp_path, "log_lines").iterdir()) == [".locks", "run_id=run-a"]
    [part] = lake.run_partition_dir(tmp_path, "log_lines", "run-a").iterdir()
    data = pq.read_table(part)
    assert data.num_rows == 2000 and len(set(data.column("writer").to_pylist())) == 1


def _materialize(archive, warehouse, reports, run_ids, rounds=1):
    return subprocess.Popen(
        [sys.executable, "-c", WORKER.format(tables=TABLES), str(archive), str(warehouse), str(reports),
         str(rounds), *run_ids],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _finish(proc, timeout_s=600):
    out, _ = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, out[-4000:]


def _partition(warehouse, table, run_id):
    data = pq.read_table(lake.run_partition_dir(warehouse, table, run_id) / "part-0.parquet")
    return data.drop_columns([c for c in data.column_names if c in VOLATILE])


def _rows(warehouse, table, run_id):
    """A partition's rows as a sorted list, floats to 12 significant digits: DuckDB writes a partition's rows
    and sums floats in whatever order its threads finish, so two equal derivations differ in those alone."""
    def value(v):
        return float(f"{v:.12g}") if isinstance(v, float) else v

    rows = [{k: value(v) for k, v in row.items()} for row in _partition(warehouse, table, run_id).to_pylist()]
    return sorted(rows, key=repr)


def test_overlapping_materialisations(tmp_path):
    """Two processes materialising overlapping runs (each run rewritten twice by each) leave every
    partition equal to a lone materialisation's, no debris, and a catalog that sees every run once."""
    labels = simulate(tmp_path / "sim", runs=4, seed=9)
    run_ids = sorted(labels["runs"])
    archive, reports = tmp_path / "sim" / "archive", tmp_path / "reports"

    _finish(_materialize(archive, tmp_path / "reference", reports, run_ids))
    shared = tmp_path / "shared"
    first = _materialize(archive, shared, reports, run_ids[:3], rounds=2)
    second = _materialize(archive, shared, reports, run_ids[1:], rounds=2)
    _finish(first)
    _finish(second)

    for table in TABLES:
        leftovers = [p.name for p in lake.table_dir(shared, table).iterdir()
                     if p.name.startswith(".") and p.name != ".locks"]
        assert leftovers == [], (table, leftovers)
        for run_id in run_ids:
            assert _rows(shared, table, run_id) == _rows(tmp_path / "reference", table, run_id), (table, run_id)
    assert not list(shared.glob(".warehouse.duckdb.*"))
    catalog = duckdb.connect(str(shared / lake.CATALOG_FILE), read_only=True)
    assert catalog.execute("select count(distinct run_id) from log_lines").fetchone()[0] == len(run_ids)
    assert catalog.execute("select count(*) from run_summary").fetchone()[0] == len(run_ids)


FLEET = "run_baselines"  # a fleet table with one row per run


def _fleet_runs(warehouse) -> list[str]:
    return sorted(pq.read_table(lake.fleet_table_path(warehouse, FLEET)).column("run_id").to_pylist())


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A warehouse with runs a and b analysed, and a way to take b's run partitions away and put them back."""
    root = tmp_path_factory.mktemp("fleet_race")
    for run_id in ("grpo-a", "grpo-b"):
        write_run(root / "archive", run_id)
    analyze_archive(root / "archive", root / "wh", root / "reports")
    return root / "wh", root / "hidden"


def _move_partitions(src_root, dst_root, run_id):
    for table in per_run_tables():
        src = lake.run_partition_dir(src_root, table, run_id)
        if src.is_dir():
            dst = lake.run_partition_dir(dst_root, table, run_id)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(src, dst)


# run A's rebuild of the fleet table in its own process, held before its write until the test says go
HELD_REBUILD = """
import sys, time
from pathlib import Path
from pipeline import derive, lake
warehouse, table, held, release = sys.argv[1:]
real_write = lake.write_fleet_table

def write(*args, **kwargs):
    Path(held).touch()
    deadline = time.monotonic() + 20
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return real_write(*args, **kwargs)

lake.write_fleet_table = write
derive.derive_fleet_table(warehouse, table)
"""


def _wait_for(path: Path, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


def _held_in_a_thread(monkeypatch, args):
    """A's rebuild in a thread of this process, its write held as HELD_REBUILD holds it."""
    warehouse, table, held, release = args
    real_write, a = lake.write_fleet_table, None

    def write(*w_args, **w_kwargs):
        if threading.current_thread() is a:
            Path(held).touch()
            _wait_for(Path(release), 20)
        return real_write(*w_args, **w_kwargs)

    monkeypatch.setattr(lake, "write_fleet_table", write)
    a = threading.Thread(target=derive.derive_fleet_table, args=(warehouse, table))
    a.start()
    return a


@pytest.mark.parametrize("a_runs_in", ["a thread", "another process"])
def test_a_fleet_rebuild_that_read_before_a_run_landed_never_writes_last(two_runs, tmp_path, monkeypatch, a_runs_in):
    """Run A's rebuild of a fleet table reads the warehouse before run B's partitions land and is held with its
    rows computed; B's partitions land and B rebuilds the table; then A is let go. The table ends with both runs'
    rows: B's rebuild waits for A's and reads after it, whether A is a thread beside it or another process (as the
    daemon's runs are)."""
    warehouse, hidden = two_runs
    _move_partitions(warehouse, hidden, "grpo-b")  # b's job has not written its run yet
    held, release = tmp_path / "held", tmp_path / "release"
    args = [str(warehouse), FLEET, str(held), str(release)]
    if a_runs_in == "a thread":
        a = _held_in_a_thread(monkeypatch, args)
    else:
        a = subprocess.Popen([sys.executable, "-c", HELD_REBUILD, *args], cwd=ROOT)
    assert _wait_for(held)
    _move_partitions(hidden, warehouse, "grpo-b")  # b's job writes its run, then rebuilds the fleet table
    b = threading.Thread(target=derive.derive_fleet_table, args=(warehouse, FLEET))
    b.start()
    b.join(timeout=3)  # the time to overtake A, were it not held back
    release.touch()
    if a_runs_in == "a thread":
        a.join(timeout=120)
    else:
        assert a.wait(timeout=120) == 0
    b.join(timeout=60)
    assert _fleet_runs(warehouse) == ["grpo-a", "grpo-b"]
