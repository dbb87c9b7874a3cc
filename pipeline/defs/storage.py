"""The command line's Dagster instance skips the disk flush of its bookkeeping, through public APIs only.

A batch of runs is one Dagster run over a range of partitions, and Dagster records each asset's
planned and done materialisation per partition: dozens of events per analysed run, each committed
alone to its SQLite files. With SQLite's default `synchronous=FULL` each commit waits for the disk,
and each closing connection (Dagster opens one per event) checkpoints the write-ahead log with
another flush: that bookkeeping cost more than half of `analyze` on a fleet of small runs. A
SQLAlchemy `connect` listener (SQLAlchemy's public event API; Dagster's storages connect through
SQLAlchemy) sets `synchronous=OFF` on every SQLite connection to a file under the instance's folder,
so the records are written by Dagster's own stock storage, in its own format, without waiting for
the disk. A crash of the machine may lose the last events of the record, never the warehouse, which
`analyze` rebuilds from the logs.

Dagster also plans a range run's materialisations in one event per asset, not one per partition, when
its environment variable DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS says so: half the record of a
batch. Dagster's price, as its own comment on the variable says: a range run that fails does not mark its
partitions failed in the UI (the run itself shows as failed, with its error).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading

from sqlalchemy import event
from sqlalchemy.engine import Engine

# Dagster's switch for one planned-materialisation event per asset of a partition-range run
PLANNED_AS_ONE_EVENT = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"

_lock = threading.Lock()
_folders: set[str] = set()  # each ends with a separator, so a folder never matches its sibling "<name>2"


def _folder_key(folder: str | os.PathLike) -> str:
    return os.path.join(os.path.realpath(os.fspath(folder)), "")


def _database_file(dbapi_connection: sqlite3.Connection) -> str:
    """The file of the connection's main database ('' for an in-memory one)."""
    row = dbapi_connection.execute("pragma database_list").fetchone()
    return row[2] if row and row[2] else ""


@functools.lru_cache(maxsize=256)
def _real_path(path: str) -> str:
    """`os.path.realpath`, once per database file: Dagster opens a connection per event (7,500 for 100 runs)."""
    return os.path.realpath(path)


def _skip_flush(dbapi_connection, _record) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection) or not _folders:
        return
    path = _database_file(dbapi_connection)
    if path and any(_real_path(path).startswith(folder) for folder in tuple(_folders)):
        dbapi_connection.execute("pragma synchronous=OFF")


def skip_flush_under(folder: str | os.PathLike) -> None:
    """From now on, SQLite connections this process opens to files under `folder` commit without a disk flush."""
    with _lock:
        _folders.add(_folder_key(folder))
        if not event.contains(Engine, "connect", _skip_flush):
            event.listen(Engine, "connect", _skip_flush)


def plan_ranges_in_one_event() -> None:
    """From now on, this process's Dagster runs over a partition range plan each asset's materialisations in one
    event (unless the environment already sets Dagster's variable either way)."""
    os.environ.setdefault(PLANNED_AS_ONE_EVENT, "true")
