"""The command line's Dagster event log: Dagster's SQLite event log, one open connection per database and
no disk flush per event.

A batch of runs is one Dagster run over a range of partitions, and Dagster records each asset's
planned and done materialisation per partition: dozens of events per analysed run, each committed
alone. Dagster's SQLite storage opens a new engine per event, its commit waits for the disk and its
closing connection checkpoints the write-ahead log with another flush: that bookkeeping cost more
than half of `analyze` on a fleet of small runs. Here each database keeps one engine with pooled
connections that commit without flushing (`synchronous=OFF`), and the events Dagster batches (a
step's per-partition materialisations, a run's planned ones) go in one transaction. A crash of the
machine may lose the last events of the record, never the warehouse, which `analyze` rebuilds from
the logs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
BATCH_SIZE = 1000


def _unflushed(dbapi_connection, _record) -> None:
    dbapi_connection.execute("pragma synchronous=OFF")


class UnflushedSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` keeping one engine per database, whose connections commit without flushing."""

    def __init__(self, base_dir: str, inst_data=None):
        # Dagster hands a step's per-partition events to `store_event_batch` only when this is set (read
        # at each event; other storages store a batch one event at a time, as without it)
        os.environ.setdefault(BATCH_SIZE_ENV, str(BATCH_SIZE))
        self._engines: dict[str, Engine] = {}
        self._batch: dict[str, Connection] | None = None  # open transactions while a batch is stored
        self._batch_stack: ExitStack | None = None
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> UnflushedSqliteEventLogStorage:
        """The storage of a `dagster.yaml` or instance override `config: {base_dir: ...}`."""
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        engine = self._engines.get(shard)
        if engine is None:
            engine = create_engine(self.conn_string_for_shard(shard), connect_args={
                "timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
            event.listen(engine, "connect", _unflushed)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            self._engines[shard] = engine
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        """A transaction on the shard's engine (Dagster's lock keeps one at a time, as its own `_connect` does);
        while a batch is stored, the batch's one transaction on that shard."""
        if self._batch is not None:
            if shard not in self._batch:
                conn = self._batch_stack.enter_context(self._engine(shard).connect())
                self._batch_stack.enter_context(conn.begin())
                self._batch[shard] = conn
            yield self._batch[shard]
            return
        with self._db_lock, self._engine(shard).connect() as conn, conn.begin():
            yield conn

    def store_event_batch(self, events: Sequence) -> None:
        """Store the events one by one as Dagster does, in one transaction per database (all or none)."""
        with self._db_lock, ExitStack() as stack:
            self._batch, self._batch_stack = {}, stack
            try:
                for entry in events:
                    self.store_event(entry)
            finally:
                self._batch, self._batch_stack = None, None

    def dispose(self) -> None:
        """Close every pooled connection, then close as Dagster's storage does."""
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        super().dispose()


def event_log_override(home: str | os.PathLike) -> dict:
    """Instance overrides: the default event log folder of `home`, kept by the unflushed storage."""
    return {
        "event_log_storage": {
            "module": __name__,
            "class": UnflushedSqliteEventLogStorage.__name__,
            "config": {"base_dir": os.path.join(os.fspath(home), "history", "runs")},
        }
    }
