"""The warehouse layout: per-run hive partitions, fleet tables, atomic rewrites and the DuckDB catalog."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import parquet_schema
from pipeline.tables import names, per_run_tables

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

CATALOG_FILE = "warehouse.duckdb"
# per catalog file: the version of it this process last wrote or read, and the views it holds
_KNOWN_CATALOGS: dict[Path, tuple[tuple[int, int, int] | None, dict[str, str]]] = {}
# threads that remove replaced partition folders at once (their waits are on the disk, not the CPU)
_REMOVERS = 4
# What an interrupted write leaves: a table's staging folder or a partition moved aside by a swap, ingest's
# scratch folder, a fleet table's or the catalog's temporary file. Removed once unchanged for STALE_AFTER_S:
# a write in progress changes its files all along, and none lasts that long.
LEFTOVER = re.compile(r"^\.(?:staging-[0-9a-f]{32}|old-run_id=.+-[0-9a-f]{8}|ingest-\w+|.+\.[0-9a-f]{32}\.tmp)$")
STALE_AFTER_S = 3600


def check_run_id(run_id: str) -> str:
    """Return `run_id` if it is a valid partition value, else raise ValueError."""
    if not RUN_ID_RE.match(run_id) or not re.search(r"[A-Za-z]", run_id):
        raise ValueError(f"invalid run_id {run_id!r}: use letters, digits, '.', '_' and '-', with a letter")
    return run_id


def table_dir(warehouse: str | Path, table: str) -> Path:
    """Folder that holds a per-run table's partitions."""
    return Path(warehouse) / table


def run_partition_dir(warehouse: str | Path, table: str, run_id: str) -> Path:
    """Folder of one run's partition of a per-run table."""
    return table_dir(warehouse, table) / f"run_id={check_run_id(run_id)}"


def fleet_table_path(warehouse: str | Path, table: str) -> Path:
    """Parquet file of a fleet table."""
    return Path(warehouse) / f"{table}.parquet"


@contextmanager
def _partition_lock(final_dir: Path):
    """Hold an exclusive lock on one partition, so two processes never swap the same run at once."""
    locks = final_dir.parent / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / final_dir.name, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


@contextmanager
def fleet_lock(warehouse: str | Path):
    """Hold the warehouse's fleet lock while a fleet table is read, computed and written: two runs side by side
    rebuild one at a time, the later one reading what the earlier wrote and every run partition written before it,
    so the last write of a fleet table has every run's rows."""
    locks = Path(warehouse) / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / "fleet", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LIBC = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux renameat2); False where the system cannot."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_into_place(new_dir: Path, final_dir: Path) -> None:
    """Replace final_dir by new_dir so readers never see a half-written run, nor a moment without one.

    Where the file system can exchange two directories atomically, final_dir is never missing; a
    reader that listed it and opens its file a moment later finds the old or the new file, whole.
    """
    swap_all_into_place([(new_dir, final_dir)])


def swap_all_into_place(pairs: Iterable[tuple[Path, Path]]) -> None:
    """`swap_into_place` for many (new_dir, final_dir) pairs: each swapped alone, atomically, under its lock.

    The folders they replace are removed after the last swap, several at a time: removing a file that is
    on disk waits for the disk (about 3 ms on ext4 with discard), and those waits overlap.
    """
    replaced = []
    try:
        for new_dir, final_dir in pairs:
            if (old := _swap(new_dir, final_dir)) is not None:
                replaced.append(old)
    finally:
        if len(replaced) == 1:
            shutil.rmtree(replaced[0], ignore_errors=True)
        elif replaced:
            with ThreadPoolExecutor(max_workers=_REMOVERS) as pool:
                list(pool.map(functools.partial(shutil.rmtree, ignore_errors=True), replaced))


def _swap(new_dir: Path, final_dir: Path) -> Path | None:
    """Put new_dir in final_dir's place under the partition's lock; the folder it replaced, moved aside, or None."""
    old_dir = final_dir.with_name(f".old-{final_dir.name}-{uuid.uuid4().hex[:8]}")
    with _partition_lock(final_dir):
        had_old = final_dir.exists()
        if had_old and _exchange(new_dir, final_dir):
            os.rename(new_dir, old_dir)
        else:
            if had_old:
                os.rename(final_dir, old_dir)
            os.rename(new_dir, final_dir)
    return old_dir if had_old else None


def _parquet_names(folder: str | Path, attempts: int = 3) -> list[str]:
    """The names of the Parquet files of one partition folder, sorted; none if it is gone (a concurrent delete).

    A listing can open the folder a swap has just moved aside and is emptying; a partition always holds a
    file, so an empty listing of a folder still in place is read again (it then finds the new folder).
    """
    for _ in range(attempts):
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".parquet"))
        except (FileNotFoundError, NotADirectoryError):
            return []
        if names:
            return names
    return []


def _parquet_files(folder: Path) -> list[Path]:
    """The Parquet files of one partition folder (`_parquet_names`)."""
    return [folder / name for name in _parquet_names(folder)]


def parquet_readable(path: str | Path) -> bool:
    """Whether `path` is a whole Parquet file as far as its ends tell: `PAR1` at both and a footer that fits.
    A file cut short (a full disk, a kill during a copy) or overwritten fails, at the cost of two small reads."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 12:
                return False
            head = fh.read(4)
            fh.seek(size - 8)
            tail = fh.read(8)
    except OSError:
        return False
    return head == b"PAR1" and tail[4:] == b"PAR1" and int.from_bytes(tail[:4], "little") <= size - 12


def partition_readable(folder: Path) -> bool:
    """Whether a per-run partition folder holds Parquet files and each is readable: an unreadable one
    counts as missing, so its run is analysed again."""
    files = _parquet_files(folder)
    return bool(files) and all(parquet_readable(f) for f in files)


def a_run_of(warehouse: str | Path, table: str) -> str | None:
    """A run that has a partition of the per-run `table` (the first by name), or None."""
    folder = table_dir(warehouse, table)
    try:
        with os.scandir(folder) as entries:
            runs = sorted(e.name for e in entries if e.name.startswith("run_id="))
    except FileNotFoundError:
        return None
    return next((run.split("=", 1)[1] for run in runs if _parquet_names(folder / run)), None)


def has_a_run(warehouse: str | Path, table: str) -> bool:
    """Whether the per-run `table` has a partition with a file: `a_run_of` without listing every run (a view of
    the whole table asks this each time it is made, dozens of times in one `analyze --run`)."""
    try:
        with os.scandir(table_dir(warehouse, table)) as entries:
            return any(e.name.startswith("run_id=") and _parquet_names(e.path) for e in entries)
    except FileNotFoundError:
        return False


def _staging_dir(warehouse: str | Path, table: str) -> Path:
    path = table_dir(warehouse, table) / f".staging-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


@contextmanager
def staged_run_partitions(warehouse: str | Path, table: str, run_ids: Iterable[str]) -> Iterator[Path]:
    """A new staging folder of the per-run `table` to write `run_id=<id>` folders into; when the block ends without
    an error, each run of `run_ids` has its folder swapped into place (`swap_all_into_place`). The staging folder
    is removed either way."""
    staging = _staging_dir(warehouse, table)
    try:
        yield staging
        swap_all_into_place((staging / f"run_id={rid}", run_partition_dir(warehouse, table, rid)) for rid in run_ids)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_run_table(
    warehouse: str | Path,
    table: str,
    run_id: str,
    data: pa.Table | Iterable[pa.RecordBatch],
    schema: pa.Schema | None = None,
) -> Path:
    """Atomically replace one run's partition of `table` with `data` (a table or a stream of batches)."""
    final_dir = run_partition_dir(warehouse, table, run_id)
    staging = _staging_dir(warehouse, table)
    try:
        target = staging / "part-0.parquet"
        if isinstance(data, pa.Table):
            pq.write_table(data, target, compression="zstd")
        else:
            writer = None
            for batch in data:
                if writer is None:
                    writer = pq.ParquetWriter(target, schema or batch.schema, compression="zstd")
                writer.write_batch(batch)
            if writer is None:
                if schema is None:
                    raise ValueError(f"no batches and no schema for {table}/{run_id}")
                pq.write_table(schema.empty_table(), target, compression="zstd")
            else:
                writer.close()
        swap_into_place(staging, final_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final_dir


class RunBatchWriter:
    """Streams record batches into one run's partition; `commit()` swaps it into place atomically."""

    def __init__(self, warehouse: str | Path, table: str, run_id: str, schema: pa.Schema):
        self.final_dir = run_partition_dir(warehouse, table, run_id)
        self.schema = schema
        self.staging = _staging_dir(warehouse, table)
        self._writer = pq.ParquetWriter(self.staging / "part-0.parquet", schema, compression="zstd")
        self.rows = 0

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append a batch (cast to the writer's schema)."""
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        self._writer.write_table(batch.cast(self.schema))
        self.rows += batch.num_rows

    def commit(self) -> Path:
        """Close the file and move it into place."""
        self._writer.close()
        swap_into_place(self.staging, self.final_dir)
        return self.final_dir

    def abort(self) -> None:
        """Drop what was written."""
        self._writer.close()
        shutil.rmtree(self.staging, ignore_errors=True)


def _newest_change(path: Path) -> float:
    """The latest modification time of `path` and, for a folder, of everything in it."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                newest = max(newest, (Path(dirpath) / name).lstat().st_mtime)
    return newest


def sweep_leftovers(warehouse: str | Path, now: float | None = None) -> list[Path]:
    """Remove what killed writes left in the warehouse (LEFTOVER names unchanged for STALE_AFTER_S); returns
    what was removed."""
    warehouse = Path(warehouse)
    now = time.time() if now is None else now
    removed = []
    try:
        folders = [warehouse, *(p for p in warehouse.iterdir()
                                if p.is_dir() and (not p.name.startswith(".") or p.name == FLEET_INPUTS_DIR))]
    except FileNotFoundError:
        return []
    for folder in folders:
        # names, not Paths: every table folder holds a name per run (22,000 names at 1,000 runs)
        for path in (folder / name for name in sorted(os.listdir(folder)) if LEFTOVER.match(name)):
            try:
                if now - _newest_change(path) < STALE_AFTER_S:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except FileNotFoundError:  # its write ended, or another sweep took it, meanwhile
                continue
            removed.append(path)
    return removed


def delete_run(warehouse: str | Path, run_id: str, tables: Iterable[str] | None = None) -> None:
    """Remove a run's partitions from every per-run table (or those of `tables`)."""
    for table in tables or per_run_tables():
        shutil.rmtree(run_partition_dir(warehouse, table, run_id), ignore_errors=True)


def write_fleet_table(warehouse: str | Path, table: str, data: pa.Table) -> Path:
    """Atomically replace a fleet table file."""
    final = fleet_table_path(warehouse, table)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(data, tmp, compression="zstd")
    os.replace(tmp, final)
    return final


def sql_literal(text: str | Path) -> str:
    """A path or text as a SQL string literal, where DuckDB cannot bind one (file names, view comments)."""
    return "'" + str(text).replace("'", "''") + "'"


def table_source(warehouse: str | Path, table: str, run_ids: Iterable[str] | None = None,
                 row_order: bool = False) -> str | None:
    """A `read_parquet(...)` expression for a table present in the warehouse, or None.

    With `run_ids`, a per-run table reads only those runs' partitions, so per-run work does not
    grow with the fleet (binding a view over every partition reads every file's footer). With `row_order`,
    each row also carries its file (`filename`) and its place in it (`file_row_number`).
    """
    single = fleet_table_path(warehouse, table)
    if single.is_file():
        # an unreadable fleet table is one to rebuild: absent until it is
        return f"read_parquet({sql_literal(single)})" if parquet_readable(single) else None
    folder = table_dir(warehouse, table)
    if not folder.is_dir():
        return None
    if run_ids is None:
        if not has_a_run(warehouse, table):
            return None
        files, by_name = sql_literal(folder / "run_id=*" / "*.parquet"), True
    else:
        paths = [p for rid in run_ids for p in _parquet_files(run_partition_dir(warehouse, table, rid))
                 if parquet_readable(p)]
        if not paths:
            return None
        files = "[" + ", ".join(sql_literal(p) for p in paths) + "]"
        # binding by name opens every file: left out where the files' schemas are known to be one
        by_name = not parquet_schema.same_schema(paths)
    order = ", filename=true, file_row_number=true" if row_order else ""
    return (
        f"read_parquet({files}, hive_partitioning=true, "
        f"hive_types={{'run_id': 'VARCHAR'}}, union_by_name={str(by_name).lower()}{order})"
    )


def present_tables(
    warehouse: str | Path, run_ids: Iterable[str] | None = None, whole: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> dict[str, str]:
    """Every table in the warehouse (of those in `only`, when given) with its `read_parquet` source.

    Per-run tables are limited to `run_ids` when given, except the tables named in `whole`.
    """
    run_ids = None if run_ids is None else list(run_ids)
    whole = set(whole)
    wanted = None if only is None else set(only)
    found = {}
    for table in names() if wanted is None else [t for t in names() if t in wanted]:
        src = table_source(warehouse, table, None if table in whole else run_ids)
        if src is not None:
            found[table] = src
    return found


def scratch_dir(warehouse: str | Path) -> Path:
    """Where DuckDB spills for work on `warehouse` (derive, fleet inputs): on the warehouse's own disk."""
    return Path(warehouse) / ".duckdb-tmp"


# the in-memory database kept open in this process (see open_database), by the process id that opened it
_SHARED_DATABASES: dict[int, duckdb.DuckDBPyConnection] = {}
_SHARED_LOCK = threading.Lock()


def open_database(path: str = ":memory:", read_only: bool = False, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB database (in memory unless `path`): the one place in the pipeline that does, so a test can
    hold every reader of the warehouse to `reader` and every other use to a connection closed where it is opened.

    In memory and without `config`, each call is a new connection to one database per process, kept open:
    opening a database costs 12 ms, a connection to an open one 0.2 ms (60 opens in one `analyze --run`). A
    connection's views, tables and macros are temporary, its own; closing it leaves the database to the next.
    With `config` (a memory cap, a spill folder: the big queries of derive, the fleet inputs and ingest) the
    database is the connection's own and goes with it: a kept database holds what its allocator kept from its
    biggest query (bringing step_phases of 9,545 runs up to date left 250 MB held).
    """
    if path != ":memory:" or config:
        return duckdb.connect(path, read_only=read_only, config=config or {})
    pid = os.getpid()
    with _SHARED_LOCK:
        if pid not in _SHARED_DATABASES:
            # a database inherited from the process this one was forked from is dropped, not used or closed: its
            # threads are the parent's
            _SHARED_DATABASES.clear()
            _SHARED_DATABASES[pid] = duckdb.connect()
        return _SHARED_DATABASES[pid].cursor()


def release_databases() -> None:
    """Let go of this process's kept in-memory databases (`open_database`): each goes, with the memory its
    allocator holds, once the last connection opened from it is closed. The next open starts a new one."""
    with _SHARED_LOCK:
        _SHARED_DATABASES.clear()


def connect(
    warehouse: str | Path,
    database: str = ":memory:",
    run_ids: Iterable[str] | None = None,
    whole: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per warehouse table (of those in `only`, when given), named as the table.

    With `run_ids`, per-run views hold only those runs, except the tables named in `whole`
    (fleet tables are always whole).
    """
    con = open_database(database)
    for table, src in present_tables(warehouse, run_ids, whole, only).items():
        con.execute(f"create or replace temp view {table} as select * from {src}")
    return con


@contextmanager
def reader(
    warehouse: str | Path,
    run_ids: Iterable[str] | None = None,
    whole: Iterable[str] = (),
    only: Iterable[str] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """`connect(...)` for a `with` block: an in-memory connection with the warehouse's views, closed however
    the block ends."""
    con = connect(warehouse, run_ids=run_ids, whole=whole, only=only)
    try:
        yield con
    finally:
        con.close()


def refresh_catalog(warehouse: str | Path) -> Path:
    """Rewrite `<warehouse>/warehouse.duckdb` with one view per table; single writer, replaced atomically.

    The views name absolute paths: DuckDB resolves a relative path against the shell's working
    folder, so a catalog written with relative paths would open only from where it was written.
    A view reads its files when queried, and creating one over a table's every partition reads each file's
    footer: so only the views of tables that appeared, went or moved are written again, on a copy of the
    catalog, and a catalog whose views already read the present tables is left as it is.
    """
    warehouse = Path(warehouse).resolve()
    final = warehouse / CATALOG_FILE
    sources = present_tables(warehouse)
    found = _file_version(final)
    # the catalog this process last wrote or read, unchanged since (opening it costs ~30 ms CPU, 80 ms wall)
    if found is not None and _KNOWN_CATALOGS.get(final) == (found, sources):
        return final
    written = _catalog_sources(final)
    if written == sources:
        _KNOWN_CATALOGS[final] = (found, sources)
        return final
    kept = written or {}
    tmp = warehouse / f".{CATALOG_FILE}.{uuid.uuid4().hex}.tmp"
    if written is not None:
        shutil.copyfile(final, tmp)
    try:
        con = open_database(str(tmp))
        try:
            for table in kept.keys() - sources.keys():
                con.execute(f"drop view if exists {table}")
            for table, src in sources.items():
                if kept.get(table) != src:
                    con.execute(f"create or replace view {table} as select * from {src}")
                    # the source as written, to tell next time whether the view still reads what is present
                    con.execute(f"comment on view {table} is {sql_literal(src)}")
        finally:
            con.close()
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _KNOWN_CATALOGS[final] = (_file_version(final), sources)
    return final


def _file_version(path: str | Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from another (inode, modification time, size); None when missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _catalog_sources(catalog: Path) -> dict[str, str] | None:
    """The source each view of an existing catalog was written with, or None when it cannot be read."""
    if not catalog.is_file():
        return None
    try:
        con = open_database(str(catalog), read_only=True)
    except duckdb.Error:  # held open for writing by someone's shell, or not a catalog we wrote
        return None
    try:
        found = con.execute("select view_name, comment from duckdb_views() where not internal").fetchall()
    finally:
        con.close()
    return {name: comment for name, comment in found}


# One Parquet file per per-run table that the fleet tables read, kept in step with the partitions: a fleet
# query over a thousand runs reads one file instead of a thousand footers (fleet_daily 3.8 s -> ms).
FLEET_INPUTS_DIR = ".fleet-inputs"
# the file's key-value metadata: each run's partition files as they were when their rows were copied
_VERSIONS_KEY = b"verl_health_partitions"


# runs a fleet input reads from their partitions at a time (see _write_fleet_input)
FLEET_INPUT_CHUNK = 200
# DuckDB's memory for rewriting a fleet input (it spills past it)
FLEET_INPUT_MEMORY = "256MB"


def fleet_input_path(warehouse: str | Path, table: str) -> Path:
    """The one-file copy of every run's partition of the per-run `table` (see `fleet_input_source`)."""
    return Path(warehouse) / FLEET_INPUTS_DIR / f"{table}.parquet"


def _partition_versions(warehouse: str | Path, table: str) -> dict[str, list[list]]:
    """Each run's partition files of `table` with what tells one version of a file from another.

    Called for every table a fleet table reads, over every run: strings, not `Path`s (3x faster).
    """
    found = {}
    base = os.fspath(table_dir(warehouse, table))
    try:
        with os.scandir(base) as entries:
            runs = sorted(e.name for e in entries if e.name.startswith("run_id="))
    except FileNotFoundError:
        return {}
    for run in runs:
        folder = os.path.join(base, run)
        files = []
        for name in _parquet_names(folder):
            # name, modification time and size: a copied warehouse (cp -a, rsync -a) keeps its fleet inputs
            if (version := _file_version(os.path.join(folder, name))) is not None:
                files.append([name, *version[1:]])
        if files:
            found[run.split("=", 1)[1]] = files
    return found


def _copied_versions(path: Path, meta: dict | None = None) -> dict[str, list[list]] | None:
    """The partition versions a fleet input file was copied from (from its schema's `meta` when given), or
    None when there is none to trust."""
    if meta is None:
        if not parquet_readable(path):
            return None
        try:
            meta = pq.read_schema(path).metadata or {}
        except (OSError, pa.ArrowException):
            return None
    return json.loads(meta[_VERSIONS_KEY]) if _VERSIONS_KEY in meta else None


def fleet_input_source(warehouse: str | Path, table: str) -> str | None:
    """A `read_parquet(...)` of every run's rows of the per-run `table`, as `table_source` gives them (same
    rows, same columns, runs in run_id order), from one file brought up to date with the partitions first.

    Only the runs whose partition files changed, appeared or went since the last copy are read again, so a
    fleet table after one new run reads that run's partitions and one file. The file is replaced whole with the
    versions it was copied from, so two processes bringing it up to date at once each leave a true copy.
    """
    versions = _partition_versions(warehouse, table)
    if not versions:
        return table_source(warehouse, table)
    path = fleet_input_path(warehouse, table)
    if _copied_versions(path) != versions and not _write_fleet_input(warehouse, table, path, versions):
        return table_source(warehouse, table)
    return f"read_parquet({sql_literal(path)})"


def fleet_sources(warehouse: str | Path, only: Iterable[str]) -> dict[str, str]:
    """`present_tables` for a reader of the whole fleet: each per-run table of `only` from its fleet input."""
    wanted, per_run = set(only), set(per_run_tables())
    found = {}
    for table in (t for t in names() if t in wanted):
        src = fleet_input_source(warehouse, table) if table in per_run else table_source(warehouse, table)
        if src is not None:
            found[table] = src
    return found


def _write_fleet_input(warehouse: str | Path, table: str, path: Path, versions: dict) -> bool:
    """Rewrite the fleet input file of `table`: the copied rows of unchanged runs and the changed runs' rows, in
    run_id order, each run's rows in its files' order; False when no run has a readable file (nothing written).

    DuckDB streams the rewrite under a memory cap (spilling to the warehouse's scratch folder): held in Arrow,
    the whole file was copied several times over (step_phases of 9,545 runs: 937 MB).
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    pinned = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    selects, params, copied = [], {}, {}
    try:
        # a link to the file as it is now: its rows and the versions they were copied from, read together
        # though another process may replace the file meanwhile
        if parquet_readable(path):
            try:
                os.link(path, pinned)
            except OSError:
                pass
            else:
                copied = _copied_versions(pinned) or {}
        changed, unchanged = [], []
        for run, files in versions.items():
            (unchanged if copied.get(run) == files else changed).append(run)
        if copied and unchanged:
            selects.append(f"select * exclude (file_row_number), '' as _file, file_row_number as _row "
                           f"from read_parquet({sql_literal(pinned)}, file_row_number=true) "
                           "where run_id in (select unnest($unchanged))")
            params["unchanged"] = unchanged
        # a changed run whose files cannot be read has no rows here, as table_source leaves it out; a chunk of
        # runs a read: DuckDB holds every file's footer of a read (run_summary: 1,060 MB for 3,000 runs at once)
        for i in range(0, len(changed), FLEET_INPUT_CHUNK):
            if (source := table_source(warehouse, table, changed[i : i + FLEET_INPUT_CHUNK], row_order=True)):
                selects.append("select * exclude (filename, file_row_number), filename as _file, "
                               f"file_row_number as _row from {source}")
        if not selects:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = "\nunion all by name\n".join(selects)
        with open_database(config={"memory_limit": FLEET_INPUT_MEMORY, "temp_directory": str(scratch_dir(warehouse)),
                                   "preserve_insertion_order": False}) as con:
            con.execute("set enable_progress_bar = false")
            con.execute(
                f"copy (select * exclude (_file, _row) from ({rows}) order by run_id, _file, _row) "
                f"to {sql_literal(tmp)} (format parquet, compression zstd, "
                f"kv_metadata {{{sql_literal(_VERSIONS_KEY.decode())}: {sql_literal(json.dumps(versions))}}})",
                params)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        pinned.unlink(missing_ok=True)
    return True
