"""`ingest_run`: one run entry -> its `runs`, `log_lines` and `step_metrics` partitions.

Blocks of lines flow through three stages: decode+classify+parse (stateless, two threads, Arrow
kernels release the GIL), context (sequential: resume segments, step in progress, config pprint),
and a writer thread streaming `log_lines` into the lake. A file's last (small) block is parsed and a
run's last write made in the calling thread: a small run starts no thread and makes one write of each
table. (Threads kept from run to run would keep their allocator's freed pages.)
Metric rows in `step_metrics` form are kept in memory and written at the end; only when a (step, key)
can occur twice (a resume repeating steps, a JSONL file, seed timings) are they reconciled first.
Past `IngestLimits.metric_rows_in_memory` they go to a scratch Parquet file instead, which DuckDB
reconciles. Memory stays flat whatever the log size.
"""

from __future__ import annotations

import shutil
import tempfile
import traceback
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.credentials import mask_secrets
from pipeline.incremental import INGEST_VERSION
from pipeline.lake import RunBatchWriter, run_partition_dir, swap_into_place, write_run_table

from .config import (
    TOTAL_STEPS,
    WANDB_CONFIG,
    WANDB_CONFIG_MAX_BYTES,
    ConfigCollector,
    config_facts,
    wandb_config,
)
from .discover import RunEntry
from .lines import (
    K_CONFIG,
    K_MEMORY,
    K_STEP,
    KINDS,
    Classified,
    Lines,
    classify,
    dated_clocks,
    decode_block,
    iter_raw_blocks,
    line_times,
    unclassified,
    without_container_stamps,
)
from .memory import block_maxima, memory_table
from .problems import LineProblems
from .readers import IngestLimits, iter_files
from .reconcile import reconciled, write_reconciled
from .roles import role_of
from .schemas import LOG_LINES_SCHEMA, RUNS_SCHEMA, STEP_METRICS_SCHEMA
from .segments import FileState, line_context
from .steps import (
    SOURCE_NAMES,
    SRC_JSONL,
    SRC_SEED_TIMING,
    StepLineCounts,
    StepRows,
    parse_memory_lines,
    parse_step_lines,
)
from .tensorboard import SOURCE as TENSORBOARD
from .tensorboard import is_event_file, read_scalars
from .wandb_run import MAX_BYTES as WANDB_SIDE_MAX_BYTES
from .wandb_run import RECORDS as WANDB_RECORDS
from .wandb_run import WandbFiles

KIND_NAMES = pa.array(KINDS, pa.string())
SOURCES = pa.array(SOURCE_NAMES, pa.string())
# `log_lines` text gathered before one write: a Parquet write costs milliseconds however small the batch
LOG_WRITE_BYTES = 8 * 2**20
# W&B's console capture (a run's files/output.log) cuts every line at this many characters
WANDB_LINE_CHARS = 4096
# log times later than the file's last change by more than any time zone's offset: a clock set ahead
# (sql/run_baselines.sql takes the file's time as the run's end then)
FUTURE_SLACK = timedelta(days=1)


@dataclass
class IngestResult:
    """What one ingest wrote."""

    run_id: str
    n_lines: int
    n_steps: int
    n_bytes: int
    n_parse_failures: int
    problems: list[str]
    paths: dict[str, Path] = field(default_factory=dict)


@dataclass
class RunTotals(StepLineCounts):
    """Counters and facts gathered over a run."""

    n_files: int = 0
    n_lines: int = 0
    n_bytes: int = 0
    n_raw_lines: int = 0  # newlines counted in the raw bytes: what `lines_conserved` checks against
    n_undecodable: int = 0
    max_segment: int = 0
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    dated_ts: datetime | None = None  # the last dated stamp read: the year of the year-less clocks after it
    config: dict | None = None
    total_steps: int | None = None


@dataclass
class BlockResult:
    """Output of the stateless stage for one block."""

    lines: Lines
    cls: Classified
    rows: StepRows
    n_nul: int


def _stage_a(raw: bytes, limits: IngestLimits) -> BlockResult:
    lines = decode_block(raw, limits.max_line_bytes)
    rows = StepRows()
    try:
        # lines a container runtime stamped are classified and parsed as the program printed them; the stamp
        # is their time (the text kept is the line as read)
        text = without_container_stamps(lines.text)
        stamped = text is not lines.text
        cls = classify(text, None if stamped else lines.joined)
        if stamped:
            cls.ts = line_times(lines.text)
        parse_step_lines(text, np.flatnonzero(cls.kind == K_STEP), rows)
        parse_memory_lines(text, np.flatnonzero(cls.kind == K_MEMORY), rows)
        cls.kind[rows.tails] = K_STEP
    except Exception as exc:  # keep the lines even if their parse hits a bug
        cls = unclassified(len(lines.text))
        rows = StepRows(problems=[(0, f"this block's lines kept unparsed ({type(exc).__name__}: {exc})")])
    return BlockResult(lines, cls, rows, raw.count(b"\x00") if b"\x00" in raw else 0)


def _done(result: BlockResult) -> Future:
    """A future already holding `result`."""
    future: Future = Future()
    future.set_result(result)
    return future


def _counted(chunks: Iterator[bytes], totals: RunTotals) -> Iterator[bytes]:
    """Pass the chunks on, counting bytes and, independently of the line splitter, lines."""
    last = b"\n"
    for chunk in chunks:
        if chunk:
            totals.n_bytes += len(chunk)
            totals.n_raw_lines += int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == 10))  # 8x bytes.count
            last = chunk[-1:]
        yield chunk
    if last != b"\n":
        totals.n_raw_lines += 1


class _RunIngest:
    """State of one run's ingest."""

    def __init__(self, entry: RunEntry, warehouse: Path, limits: IngestLimits):
        self.entry = entry
        self.warehouse = warehouse
        self.limits = limits
        self.problems: list[str] = []
        self.line_problems = LineProblems()
        self.config_dumps: list[ConfigCollector] = []
        self.wandb_config: dict | None = None
        self.wandb = WandbFiles()
        self.file_roles: list[dict[str, str]] = []  # each file read, with the role its name tells
        self.scratch_dir: Path | None = None
        self.totals = RunTotals()
        self.log_writer = RunBatchWriter(warehouse, "log_lines", entry.run_id, LOG_LINES_SCHEMA)
        self.log_parts: list[pa.Table] = []  # `log_lines` batches not yet handed to the writer thread
        self.log_bytes = 0
        # the metric rows in `step_metrics` form: written as they are, unless a (step, key) can occur twice,
        # when they are reconciled first; in memory, or past the limit in a scratch file
        self.metric_parts: list[pa.Table] = []
        self.raw_path: Path | None = None
        self.raw_writer: pq.ParquetWriter | None = None
        self.n_raw_rows = 0
        self.steps: set[int] = set()  # steps with a metric row
        self.seen_steps: set[int] = set()  # steps of step lines
        self.needs_reconcile = False  # only when a (step, key) can occur twice: resumes, JSONL, seed timings, a key
        # given twice on one line
        self.memory: list[pa.Table] = []  # per block: the largest memory value per (segment, step, key)
        # their threads start at the first hand-off: a run of small files starts none
        self.parse_pool = ThreadPoolExecutor(2, thread_name_prefix="ingest-parse")
        self.write_pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-write")
        self.pending_write: Future | None = None

    def run(self) -> None:
        pool = self.parse_pool
        files = iter_files(self.entry.path, self.entry.form, self.limits, self.problems)
        for name, chunks in files:
            self.totals.n_files += 1
            self.file_roles.append({"file": name, "role": role_of(name)})
            if WANDB_CONFIG.search(name):
                kept: list[bytes] = []
                self._file(pool, name, _kept(chunks, kept, WANDB_CONFIG_MAX_BYTES))
                self.wandb_config = wandb_config(b"".join(kept), name, self.problems)
            elif self.wandb.wants(name):
                kept = []
                self._file(pool, name, _kept(chunks, kept, WANDB_SIDE_MAX_BYTES))
                self.wandb.read(name, b"".join(kept), self.problems)
            elif is_event_file(name):
                self._tensorboard(name, chunks)
            elif WANDB_RECORDS.search(name):  # W&B's binary transaction log: no lines to keep
                self.totals.n_bytes += sum(len(chunk) for chunk in chunks)
            else:
                self._file(pool, name, chunks)
        self.write_lines()

    def scratch(self) -> Path:
        """The run's scratch folder in the warehouse, made when first needed (a spill, a TensorBoard copy)."""
        if self.scratch_dir is None:
            self.scratch_dir = Path(tempfile.mkdtemp(prefix=".ingest-", dir=self.warehouse))
        return self.scratch_dir

    def _tensorboard(self, name: str, chunks: Iterator[bytes]) -> None:
        """A TensorBoard event file: its scalars into step_metrics (binary: no log_lines), its times into the run's."""

        def counted(chunks: Iterator[bytes]) -> Iterator[bytes]:
            for chunk in chunks:
                self.totals.n_bytes += len(chunk)
                yield chunk

        t = self.totals
        for batch in read_scalars(counted(chunks), name, self.scratch(), self.problems):
            n = batch.num_rows
            out = pa.table({
                "step": batch.column("step"), "key": batch.column("key"), "value": batch.column("value"),
                "source": pa.array([TENSORBOARD] * n, pa.string()),
                # like JSONL rows: a resumed run's later event file wins in the reconcile, by its name
                "segment": pa.array(np.full(n, -1, dtype=np.int32)),
                "file": pa.array([name] * n, pa.string()), "line_no": batch.column("record"),
            })
            self._keep_metrics(out.cast(STEP_METRICS_SCHEMA))
            self.needs_reconcile = True
            self.steps.update(pc.unique(batch.column("step")).to_pylist())
            lo, hi = pc.min_max(batch.column("ts")).values()
            if lo.is_valid:
                t.first_ts = lo.as_py() if t.first_ts is None else min(t.first_ts, lo.as_py())
                t.last_ts = hi.as_py() if t.last_ts is None else max(t.last_ts, hi.as_py())

    def _file(self, pool: ThreadPoolExecutor, name: str, chunks: Iterator[bytes]) -> None:
        state = FileState()
        pending: deque[Future] = deque()
        line_no = 1  # of the next block's first line
        n_nul = n_bad = 0
        self.n_truncated = self.n_cut_at_4096 = 0
        crlf = False
        for raw in iter_raw_blocks(_counted(chunks, self.totals), name, self.limits, self.problems):
            if len(raw) < self.limits.block_bytes // 2:  # a file's last block: a hand-off would cost more
                pending.append(_done(_stage_a(raw, self.limits)))
            else:
                pending.append(pool.submit(_stage_a, raw, self.limits))
            while len(pending) > 1:
                res = pending.popleft().result()
                n_nul, n_bad = self._stage_b(res, line_no, state, name, n_nul, n_bad)
                line_no += len(res.lines.text)
                crlf = crlf or res.lines.crlf
        while pending:
            res = pending.popleft().result()
            n_nul, n_bad = self._stage_b(res, line_no, state, name, n_nul, n_bad)
            line_no += len(res.lines.text)
            crlf = crlf or res.lines.crlf
        if state.collector is not None:
            self._finish_config(state.collector)
        if n_nul:
            self.problems.append(f"{name}: binary content ({n_nul} NUL bytes): kept as text lines")
        if n_bad:
            self.problems.append(
                f"{name}: {n_bad} line(s) not valid UTF-8: kept with U+FFFD replacement characters"
            )
        if self.n_cut_at_4096:
            self.problems.append(
                f"{name}: {self.n_cut_at_4096} line(s) exactly {WANDB_LINE_CHARS} characters long: W&B's console"
                " capture (output.log) cuts lines there, so their ends, the last metrics of a step line, are missing"
            )
        if self.n_truncated:
            self.problems.append(
                f"{name}: {self.n_truncated} line(s) longer than {self.limits.max_line_bytes} bytes kept truncated"
            )
        if crlf:
            self.problems.append(f"{name}: CRLF line endings: the \\r of each ending was removed")

    def _stage_b(self, res: BlockResult, first: int, state: FileState, name: str, n_nul: int, n_bad: int):
        lines, cls, rows = res.lines, res.cls, res.rows
        text, n = lines.text, len(lines.text)
        kind = cls.kind
        self._config_lines(text, kind, cls.config_open, state)
        seg, ctx = line_context(n, cls, rows, state)
        t = self.totals
        t.n_lines += n
        t.n_undecodable += lines.n_undecodable
        self.n_truncated += lines.n_truncated
        if n:
            self.n_cut_at_4096 += pc.sum(pc.equal(pc.utf8_length(text), WANDB_LINE_CHARS)).as_py() or 0
        t.add_counts(rows)
        t.max_segment = max(t.max_segment, state.segment)
        for i, msg in rows.problems:
            self.line_problems.add(name, first + i, msg)
        ts = dated_clocks(cls.ts, cls.clock, t.dated_ts)
        if n and cls.ts.null_count < n:
            t.dated_ts = cls.ts.filter(pc.is_valid(cls.ts))[-1].as_py()
        if n and ts.null_count < n:
            lo, hi = pc.min_max(ts).values()
            t.first_ts = lo.as_py() if t.first_ts is None else min(t.first_ts, lo.as_py())
            t.last_ts = hi.as_py() if t.last_ts is None else max(t.last_ts, hi.as_py())
        file_col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([name]))
        batch = pa.table(
            {
                "file": file_col,
                "line_no": pa.array(np.arange(first, first + n, dtype=np.int64)),
                "text": text,
                "kind": KIND_NAMES.take(pa.array(kind)),
                "component": cls.component,
                "pid": cls.pid,
                "segment": pa.array(seg),
                "step": pa.array(ctx),
                "phase_hint": cls.phase_hint,
                "ts": ts,
            }
        )
        self.log_parts.append(batch)
        self.log_bytes += text.nbytes
        if self.log_bytes >= LOG_WRITE_BYTES:
            self.write_lines(at_once=False)
        self._write_rows(rows, seg, ctx, name, first)
        return n_nul + res.n_nul, n_bad + lines.n_undecodable

    def write_lines(self, at_once: bool = True) -> None:
        """Write the gathered `log_lines` batches as one write, after the previous one: `at_once` in this
        thread, else in the writer thread."""
        if self.log_parts:
            batch = self.log_parts[0] if len(self.log_parts) == 1 else pa.concat_tables(self.log_parts)
            self.log_parts, self.log_bytes = [], 0
            self._flush_write()
            if at_once:
                self.log_writer.write(batch)
            else:
                self.pending_write = self.write_pool.submit(self.log_writer.write, batch)
        if at_once:
            self._flush_write()

    def _flush_write(self) -> None:
        if self.pending_write is not None:
            self.pending_write.result()
            self.pending_write = None

    def _config_lines(
        self, text: pa.StringArray, kind: np.ndarray, opens: np.ndarray, state: FileState
    ) -> None:
        """Mark the pprint's lines as config and parse it; read `Total training steps: N`."""
        starts = np.flatnonzero(opens)
        pos = 0
        n = len(text)
        while pos < n:
            if state.collector is None:
                k = np.searchsorted(starts, pos)
                if k == len(starts):
                    break
                pos = int(starts[k])
                state.collector = ConfigCollector(text[pos].as_py())
            taken, offered = state.collector.take(text, pos)
            kind[taken] = K_CONFIG
            pos += offered
            if state.collector.done:
                self._finish_config(state.collector)
                state.collector = None
        cfg_idx = np.flatnonzero(kind == K_CONFIG)
        if len(cfg_idx):
            hits = pc.extract_regex(text.take(pa.array(cfg_idx)), TOTAL_STEPS.pattern)
            found = [h["n"] for h in hits.to_pylist() if h is not None] if hits.null_count < len(hits) else []
            if found:
                self.totals.total_steps = int(found[-1])

    def _finish_config(self, collector: ConfigCollector) -> None:
        # parsing waits for the end: a log of many start-ups prints many dumps and only the last counts
        self.config_dumps.append(collector)

    def resolve_config(self) -> None:
        """The run's config: the last console dump that parses (a problem for each later one that does not),
        else the W&B run's config.yaml (a W&B capture starts after the console printed its dump)."""
        for collector in reversed(self.config_dumps):
            cfg, why = collector.parse()
            if cfg is not None:
                self.totals.config = cfg
                return
            self.problems.append(why)
        self.totals.config = self.wandb_config

    def _write_rows(self, rows: StepRows, seg: np.ndarray, ctx: np.ndarray, name: str, first: int) -> None:
        for memory in rows.memory:
            self.memory.append(block_maxima(memory, seg, ctx, name, first))
        table = rows.table()
        if table.num_rows == 0:
            return
        for _, step in rows.events:
            self.needs_reconcile = self.needs_reconcile or step in self.seen_steps
            self.seen_steps.add(step)
        idx = table.column("line_idx").to_numpy()
        source = table.column("source").to_numpy()
        step = table.column("step").to_numpy().copy()
        step[step < 0] = ctx[idx[step < 0]]
        segment = seg[idx].astype(np.int32)
        segment[source == SRC_JSONL] = -1
        if (source == SRC_JSONL).any() or (source == SRC_SEED_TIMING).any() or rows.n_duplicate_keys:
            self.needs_reconcile = True
        n = table.num_rows
        out = pa.table(
            {
                "step": pa.array(step),
                "key": table.column("key"),
                "value": table.column("value"),
                "source": pa.DictionaryArray.from_arrays(pa.array(source), SOURCES),
                "segment": pa.array(segment),
                "file": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, dtype=np.int8)), pa.array([name])
                ),
                "line_no": pa.array(idx + first),
            }
        )
        self._keep_metrics(out.cast(STEP_METRICS_SCHEMA))
        self.steps.update(pc.unique(out.column("step")).to_pylist())

    def _keep_metrics(self, rows: pa.Table) -> None:
        """Keep a block's metric rows: in memory up to `limits.metric_rows_in_memory`, then in a scratch file."""
        self.n_raw_rows += rows.num_rows
        if self.raw_writer is None:
            self.metric_parts.append(rows)
            if self.n_raw_rows <= self.limits.metric_rows_in_memory:
                return
            folder = self.scratch() / "step_metrics"
            folder.mkdir()
            self.raw_path = folder / "part-0.parquet"
            self.raw_writer = pq.ParquetWriter(self.raw_path, STEP_METRICS_SCHEMA, compression="zstd")
            rows = pa.concat_tables(self.metric_parts)
            self.metric_parts = []
        self.raw_writer.write_table(rows)

    def reconcile(self, warehouse: Path) -> tuple[Path, int, int]:
        """Keep one value per (step, key) and write `step_metrics`; returns (path, n_steps, n_values).

        Without a (step, key) that can occur twice, the rows are written as they are (a scratch file of them
        is moved into place).
        """
        memory = memory_table(self.memory)
        self.steps.update(pc.unique(memory.column("step")).to_pylist())
        if self.raw_writer is None:
            rows = pa.concat_tables([STEP_METRICS_SCHEMA.empty_table(), *self.metric_parts])
            table = pa.concat_tables([reconciled(rows) if self.needs_reconcile else rows, memory])
            path = write_run_table(warehouse, "step_metrics", self.entry.run_id, table)
            return path, len(self.steps), table.num_rows
        if not self.needs_reconcile:
            if memory.num_rows:
                self.raw_writer.write_table(memory)
            self.raw_writer.close()
            final = run_partition_dir(warehouse, "step_metrics", self.entry.run_id)
            swap_into_place(self.raw_path.parent, final)
            return final, len(self.steps), self.n_raw_rows + memory.num_rows
        self.raw_writer.close()
        path, n_values = write_reconciled(warehouse, self.entry.run_id, self.raw_path, memory)
        return path, len(self.steps), n_values


def _verl_format(t: RunTotals) -> str:
    if t.n_np:
        return "np2"
    if t.n_console:
        return "v04" if t.n_v04 >= 0.9 * t.n_v04_sampled else "bare"
    return "seed_kv" if t.n_seed else "none"


def _kept(chunks: Iterator[bytes], kept: list[bytes], limit: int) -> Iterator[bytes]:
    """`chunks` passed on unchanged, the first `limit` bytes of them also kept in `kept`."""
    size = 0
    for chunk in chunks:
        if size < limit:
            kept.append(chunk[: limit - size])
            size += len(kept[-1])
        yield chunk


def runs_row(row: dict) -> pa.Table:
    """The one-row `runs` table of `row`: a value its column cannot hold becomes null, with a problem."""
    try:
        return pa.Table.from_pylist([row], schema=RUNS_SCHEMA)
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        pass
    for column in RUNS_SCHEMA:
        try:
            pa.array([row.get(column.name)], column.type)
        except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:
            row["problems"].append(f"runs.{column.name}: {str(row[column.name])[:40]!r} cannot be stored "
                                   f"({type(exc).__name__}): kept as null")
            row[column.name] = None
    return pa.Table.from_pylist([row], schema=RUNS_SCHEMA)


def ingest_run(entry: RunEntry, warehouse: str | Path, limits: IngestLimits | None = None) -> IngestResult:
    """Ingest one run entry into the lake: `runs`, `log_lines`, `step_metrics` partitions, each replaced atomically.

    Bad data never raises: what could be read is written and `problems` says what was wrong.
    """
    try:
        return _ingest_run(entry, warehouse, limits or IngestLimits())
    finally:
        # Arrow's allocator (mimalloc) keeps the pages a run freed, 300 MB after the 306 MB run: they would
        # be carried through the later steps of the process, onto its peak
        pa.default_memory_pool().release_unused()


def _ingest_run(entry: RunEntry, warehouse: str | Path, limits: IngestLimits) -> IngestResult:
    warehouse = Path(warehouse)
    warehouse.mkdir(parents=True, exist_ok=True)
    job = _RunIngest(entry, warehouse, limits)
    try:
        try:
            job.run()
        except Exception as exc:  # a bug must not lose the lines already read nor stop the fleet
            job.write_lines()
            job.problems.append(f"ingest stopped early: {type(exc).__name__}: {exc}")
            job.problems.append(traceback.format_exc(limit=3).strip().splitlines()[-1])
        job.problems.extend(job.line_problems.summary())
        job.resolve_config()
        log_path = job.log_writer.commit()
        metrics_path, n_steps, n_values = job.reconcile(warehouse)
        t = job.totals
        if t.n_lines == 0 and n_values == 0:
            job.problems.append("empty run: no lines were read")
        changed = datetime.fromtimestamp(entry.mtime) if entry.mtime else None
        if t.last_ts is not None and changed is not None and t.last_ts > changed + FUTURE_SLACK:
            job.problems.append(f"log times run to {t.last_ts:%Y-%m-%d %H:%M}, over a day after the file's last "
                                f"change ({changed:%Y-%m-%d %H:%M}): a host clock set ahead? The run ends at the "
                                "file's time")
        facts = config_facts(t.config, t.total_steps, job.problems)
        wandb_facts = job.wandb.run_facts()
        wandb_times = job.wandb.started_at, job.wandb.ended_at
        job.problems.extend(job.wandb.problems)
        job.problems[:] = [mask_secrets(p) for p in job.problems]  # an exception's text may quote a line
        row = {
            "source_path": str(entry.path),
            "archive_form": entry.form,
            "n_files": t.n_files,
            "n_lines": t.n_lines,
            "n_bytes": t.n_bytes,
            "n_lines_read": t.n_raw_lines,
            "n_undecodable_lines": t.n_undecodable,
            "n_step_lines": t.n_step_lines,
            "n_steps": n_steps,
            "n_metric_values": n_values,
            "n_parse_failures": t.n_failures,
            "n_segments": t.max_segment + 1,
            "problems": list(job.problems),
            # a W&B capture prints no times of its own: the run's start and last log as W&B saw them
            "first_ts": t.first_ts if t.first_ts is not None else wandb_times[0],
            "last_ts": t.last_ts if t.last_ts is not None else wandb_times[1],
            "mtime": datetime.fromtimestamp(entry.mtime) if entry.mtime else None,
            # to the microsecond: it names this ingest, and run_summary carries it (incremental.is_unchanged)
            "ingested_at": datetime.now(),
            **facts,
            "verl_format": _verl_format(t),
            "ingest_version": INGEST_VERSION,
            **wandb_facts,
            "file_roles": job.file_roles,
        }
        runs_path = write_run_table(warehouse, "runs", entry.run_id, runs_row(row))
    finally:
        job.parse_pool.shutdown(wait=True)
        job.write_pool.shutdown(wait=True)
        if job.log_writer.staging.exists():
            job.log_writer.abort()
        if job.scratch_dir is not None:
            shutil.rmtree(job.scratch_dir, ignore_errors=True)
    return IngestResult(
        run_id=entry.run_id,
        n_lines=t.n_lines,
        n_steps=n_steps,
        n_bytes=t.n_bytes,
        n_parse_failures=t.n_failures,
        problems=list(job.problems),
        paths={"runs": runs_path, "log_lines": log_path, "step_metrics": metrics_path},
    )
