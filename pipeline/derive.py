"""Derive layer: runs `sql/<table>.sql` in DuckDB over the lake and writes the derived tables.

Per-run tables are derived over views that hold only the requested runs' partitions (`_connect`), so a
per-run SQL file reads its inputs whole and filters by no run; fleet tables are recomputed whole. No value
is ever formatted into SQL text: thresholds and vocabularies are bound parameters.
"""

from __future__ import annotations

import functools
import shutil
import time
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import lake, tables, vocabulary
from pipeline.credentials import sql_macro
from pipeline.error_templates import NAME as ERROR_TEMPLATES
from pipeline.error_templates import register_line_templates
from pipeline.isolation import SUMMARY
from pipeline.vocabulary import NOT_ANALYSED


def _sql_dir() -> Path:
    """The SQL files: inside the package where a wheel put them (setup.py), else `sql/` of the checkout."""
    package = Path(__file__).resolve().parent
    shipped = package / "sql"
    return shipped if shipped.is_dir() else package.parent / "sql"


SQL_DIR = _sql_dir()
THRESHOLDS_FILE = Path(__file__).resolve().parent / "knowledge" / "derive_thresholds.toml"
ADVICE_FILE = Path(__file__).resolve().parent / "knowledge" / "run_advice.toml"
# every field an advice rule may set (see run_advice.toml); a rule leaves the rest null
ADVICE_FIELDS = {
    "name": str, "rank": int, "classes": list, "anomalies": list, "phases": list, "text": str, "hang": str,
    "finding": str, "no_finding": str, "requires": str, "unless": str, "role": str, "engine": str, "devices": list,
    "older": str, "fact": str, "min_fact": float, "kind": str, "setting": str, "default": str, "only_if": str,
    "action": str, "delta": float, "factor": float, "at_least": float, "at_most": float, "keep_fraction": bool, "value": str,
    "direction": str, "why": str, "source": str,
}
ADVICE_ACTIONS = ("halve", "double", "step", "scale", "enable", "disable", "set", "check")
ADVICE_KINDS = ("config", "env", "check")
DERIVE_MEMORY_LIMIT = "512MB"
# runs derived at a time: 999 runs in one go peaked at 1,369 MB, in chunks of 100 at 520 MB (and took 0.8x the time)
RUN_CHUNK = 100
# how often a derive query is bound again after another process swapped a partition it was reading
READ_ATTEMPTS = 4
# what DuckDB says when a file it bound is gone or replaced before it reads it
_SWAPPED_UNDER_READER = ("No such file", "No files found", "TProtocolException", "Invalid data")

# vocabularies a SQL file binds as parameters: the timers inside a step, every timer; and which files bind which
VOCABULARIES = {"step_phases": vocabulary.STEP_PHASES, "timers": tables.TIMER_PHASES}
VOCABULARIES_BOUND = {"step_phases": ("step_phases", "timers"), "fleet_config_groups": ("step_phases",)}
# Declared in pipeline/tables.py, in dependency order (run_summary after the tables it reads).
RUN_TABLES = tables.sql_tables(per_run=True)
FLEET_TABLES = tables.sql_tables(per_run=False)


@functools.cache
def _thresholds_file() -> dict[str, dict[str, float]]:
    with THRESHOLDS_FILE.open("rb") as fh:
        return tomllib.load(fh)


@functools.cache
def advice_rules() -> tuple[dict, ...]:
    """The rules of run_advice.toml, each with every field of ADVICE_FIELDS (null where not set)."""
    with ADVICE_FILE.open("rb") as fh:
        rules = tomllib.load(fh)["rule"]
    out = []
    for rule in rules:
        unknown = set(rule) - set(ADVICE_FIELDS)
        kind = rule.get("kind", "config")
        if (unknown or rule.get("action") not in ADVICE_ACTIONS or kind not in ADVICE_KINDS
                or (kind == "check") != (rule.get("action") == "check") or (kind == "check") == ("setting" in rule)
                or not str(rule.get("source", "")).startswith("https://")):
            raise ValueError(f"advice rule {rule.get('name')!r}: unknown fields {sorted(unknown)}, action "
                             f"{rule.get('action')!r}, kind {kind!r}, a setting on a check or none on a change, "
                             f"or a source that is no public page (see {ADVICE_FILE.name})")
        full = {key: (cast(rule[key]) if key in rule else None) for key, cast in ADVICE_FIELDS.items()}
        full["kind"] = kind
        full["keep_fraction"] = bool(full["keep_fraction"])
        out.append(full)
    return tuple(out)


# config keys run_advice reads for the run's roles, rollout engine and device, beside those the rules name
ADVICE_FACT_KEYS = ("trainer.device", "actor_rollout_ref.rollout.name", "critic.enable", "algorithm.adv_estimator",
                    "actor_rollout_ref.actor.use_kl_loss", "algorithm.use_kl_in_reward")


def advice_config_keys() -> list[str]:
    """Every config key run_advice reads, sorted: each rule's setting, older name, requires and unless, the
    section a config setting sits in (a dump that shows the section without the key is a verl without it), and
    the keys of the run's roles, engine and device."""
    fields = ("setting", "older", "requires", "unless")
    keys = {rule[f] for rule in advice_rules() for f in fields if rule[f] is not None}
    sections = {rule["setting"].rsplit(".", 1)[0] for rule in advice_rules()
                if rule["kind"] == "config" and "." in (rule["setting"] or "")}
    return sorted(keys | sections | set(ADVICE_FACT_KEYS))


def default_thresholds() -> dict[str, dict[str, float]]:
    """The thresholds each SQL file binds as `$thresholds`, by table (from derive_thresholds.toml)."""
    return {table: dict(values) for table, values in _thresholds_file().items()}


def _params(name: str, thresholds: Mapping[str, Mapping[str, float]] | None = None) -> dict:
    """The bound parameters of `sql/<name>.sql`: its thresholds if it has any, its rules and vocabularies."""
    params: dict = {}
    defaults = _thresholds_file().get(name)
    overrides = dict((thresholds or {}).get(name) or {})
    unknown = set(overrides) - set(defaults or {})
    if unknown:
        raise ValueError(f"{name} has no thresholds {sorted(unknown)} (see {THRESHOLDS_FILE.name})")
    if defaults is not None:
        params["thresholds"] = {**defaults, **overrides}
    if name == "run_advice":
        params["rules"] = list(advice_rules())
        params["config_keys"] = advice_config_keys()
        params["config_paths"] = [f"$.{key}" for key in params["config_keys"]]
    if name == SUMMARY:
        params["not_analysed"] = NOT_ANALYSED
    params.update({key: list(VOCABULARIES[key]) for key in VOCABULARIES_BOUND.get(name, ())})
    return params


def sql_text(name: str) -> str:
    """The text of `sql/<name>.sql`, read now so an edited file takes effect on the next run."""
    return (SQL_DIR / f"{name}.sql").read_text()


def masked_sql(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> str:
    """`sql/<name>.sql` with each text column of its rows passed through `mask_secrets` (pipeline/credentials.py):
    a line's credentials stay in `log_lines` and reach no derived table, report or mail. The text columns are
    those of the query bound on `con` (a warehouse written by an older version may lack some)."""
    sql = sql_text(name)
    rel = con.sql(sql, params=params).limit(0)
    text = [c for c, t in zip(rel.columns, rel.types, strict=True) if str(t) == "VARCHAR" and c != "run_id"]
    if not text:
        return sql
    quoted = ['"' + c.replace('"', '""') + '"' for c in text]
    masked = ", ".join(f"mask_secrets({c}) as {c}" for c in quoted)
    return f"select * replace ({masked}) from (\n{sql}\n)"


def _connect(warehouse: str | Path, names: Iterable[str], run_ids: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A connection with a view per table that the SQL files `names` read, as `lake.connect` makes them; with
    `run_ids`, per-run tables hold those runs' partitions (binding a view reads every file's footer)."""
    # a bounded memory makes DuckDB spill big joins to the warehouse's scratch folder instead of
    # holding a 300 MB log's lines several times over (2 GB peak before, under 1 GB with it)
    con = lake.open_database(config={"memory_limit": DERIVE_MEMORY_LIMIT,
                                     "temp_directory": str(lake.scratch_dir(warehouse))})
    con.execute("set enable_progress_bar = false")
    con.execute(sql_macro())
    vocabulary_tables(con)
    # only the tables the SQL reads get a view: binding a view reads every file's footer; a table that one of
    # `names` writes gets its view once written (each SQL reads only tables written before it)
    for table in dict.fromkeys(t for name in names for t in tables.table(name).reads if t not in names):
        if lake.table_source(warehouse, table) is not None:
            _refresh_view(con, warehouse, table, run_ids)
        elif tables.table(table).stand_in:
            con.execute(f"create temp table {table} ({tables.table(table).stand_in})")
    return con


def vocabulary_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The vocabularies the SQL joins, as temp tables filled from pipeline/vocabulary.py through bound
    parameters: `failure_classes` (failure_class, failed, position)."""
    con.execute(
        "create or replace temp table failure_classes as "
        "select c as failure_class, not list_contains($not_failed, c) as failed, i as position "
        "from (select unnest($classes) as c, generate_subscripts($classes, 1) as i)",
        {"classes": list(vocabulary.FAILURE_CLASSES), "not_failed": list(vocabulary.NOT_FAILED)},
    )


def _refresh_view(con: duckdb.DuckDBPyConnection, warehouse: str | Path, table: str,
                  run_ids: list[str] | None = None) -> None:
    """Point the view of `table` at what is on disk now (it may have been written by this process): at the
    partitions of `run_ids` when given, and where the table has none of them, at no rows with its columns; without
    `run_ids`, a per-run table is read from its one-file fleet input (`lake.fleet_input_source`)."""
    whole_run_table = run_ids is None and tables.table(table).per_run
    src = lake.fleet_input_source(warehouse, table) if whole_run_table else lake.table_source(warehouse, table, run_ids)
    rows = ""
    if src is None and run_ids is not None and (other := lake.a_run_of(warehouse, table)) is not None:
        src, rows = lake.table_source(warehouse, table, [other]), " limit 0"
    if src is not None:
        # the empty stand-in of a table this connection has since written gives way to the table
        if con.execute("select 1 from duckdb_tables() where table_name = $t", {"t": table}).fetchone():
            con.execute(f"drop table {table}")
        con.execute(f"create or replace temp view {table} as select * from {src}{rows}")


def _query_into(
    con: duckdb.DuckDBPyConnection, warehouse: str | Path, name: str, params: dict, run_ids: list[str], staging: Path
) -> tuple[int, set[str]]:
    """Run `sql/<name>.sql` into `staging`, one folder per run; returns the rows and the runs written.

    DuckDB opens a file when the query is bound and again when it scans it: a partition another process
    swaps in between is gone or another file by then. The query is bound again to what is on disk now.
    """
    for attempt in range(1, READ_ATTEMPTS):
        try:
            return _write_query(con, name, params, run_ids, staging)
        except duckdb.Error as exc:
            if not any(s in str(exc) for s in _SWAPPED_UNDER_READER):
                raise
        shutil.rmtree(staging, ignore_errors=True)
        for table in tables.table(name).reads:
            _refresh_view(con, warehouse, table, run_ids)
        time.sleep(0.05 * attempt)
    return _write_query(con, name, params, run_ids, staging)


def _write_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict, run_ids: list[str], staging: Path
) -> tuple[int, set[str]]:
    """One COPY of the query's rows into a folder per run: the rows of the runs asked for, and those that got a file.

    The count is DuckDB's (RETURN_FILES costs nothing; RETURN_STATS would double the write's CPU).
    """
    count, files = con.execute(
        f"copy ({masked_sql(con, name, params)}\n) to {lake.sql_literal(staging)} (format parquet, partition_by (run_id), "
        "compression zstd, filename_pattern 'part-{i}', return_files)",
        params,
    ).fetchone()
    run_of = {Path(f): Path(f).parent.name.split("=", 1)[1] for f in files}
    asked = set(run_ids)
    # rows of a run not asked for are not kept, so not counted (the views of the runs asked for give none)
    count -= sum(pq.ParquetFile(f).metadata.num_rows for f, run in run_of.items() if run not in asked)
    return count, asked & set(run_of.values())


def _empty_parquet(con: duckdb.DuckDBPyConnection, name: str, params: dict, staging: Path) -> bytes:
    """A Parquet file of no rows with the columns of the runs' files in `staging` (else of the query)."""
    written = next(staging.glob("run_id=*/*.parquet"), None)
    if written is not None:
        schema = pq.read_schema(written)
    else:
        schema = con.sql(sql_text(name), params=params).limit(0).to_arrow_table().drop_columns(["run_id"]).schema
    sink = pa.BufferOutputStream()
    # not schema.empty_table(): it imports pandas (0.6 s), for the same bytes
    pq.write_table(pa.Table.from_batches([], schema=schema), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _run_table(
    con: duckdb.DuckDBPyConnection,
    warehouse: str | Path,
    name: str,
    run_ids: list[str],
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    read_after: bool = True,
) -> int:
    """Replace the partitions of `run_ids` with the query's rows; a run without rows gets an empty partition.

    DuckDB writes every run's partition in one pass into a staging folder; each is then renamed into
    place, so readers see a run's old or new rows, never a mix. With `read_after`, the connection's view
    of the table then reads the new partitions.
    """
    run_ids = [lake.check_run_id(r) for r in run_ids]
    params = _params(name, thresholds)
    with lake.staged_run_partitions(warehouse, name, run_ids) as staging:
        rows, written = _query_into(con, warehouse, name, params, run_ids, staging)
        empty = None
        for rid in run_ids:
            if rid not in written:
                empty = empty or _empty_parquet(con, name, params, staging)
                part = staging / f"run_id={rid}"
                part.mkdir()
                (part / "part-0.parquet").write_bytes(empty)
    if read_after:
        _refresh_view(con, warehouse, name, run_ids)
    return rows


def summary_schema(warehouse: str | Path, run_id: str) -> pa.Schema | None:
    """run_summary's columns but run_id, as its SQL binds on the tables `run_id` has, each derived table it lacks
    bound from its own SQL in turn (None where that does not bind): the columns of the row a run gets when its
    run_summary could not be derived (`mark_not_analysed`), so the tables that read run_summary still bind."""
    con = lake.open_database()
    try:
        con.execute(sql_macro())
        vocabulary_tables(con)
        _bind_columns(con, warehouse, SUMMARY, run_id)
        schema = con.table(SUMMARY).to_arrow_table().schema
        return schema.remove(schema.get_field_index("run_id"))
    except duckdb.Error:
        return None
    finally:
        con.close()


def _bind_columns(con: duckdb.DuckDBPyConnection, warehouse: str | Path, name: str, run_id: str) -> None:
    """A temp table `name` with no rows and the columns its SQL gives over the tables it reads: a view of each
    as derive makes it (`_refresh_view`), else (a derived table) its own SQL's columns, else its stand-in."""
    for table in tables.table(name).reads:
        if not _bound(con, table):
            _refresh_view(con, warehouse, table, [run_id])
        if _bound(con, table):
            continue
        if table in RUN_TABLES:
            _bind_columns(con, warehouse, table, run_id)
        elif tables.table(table).stand_in:
            con.execute(f"create temp table {table} ({tables.table(table).stand_in})")
    con.execute(f"create temp table {name} as select * from ({sql_text(name)}) limit 0", _params(name))


def _bound(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether `con` has a table or view named `table`."""
    return con.execute("select 1 from duckdb_tables() where table_name = $t union all "
                       "select 1 from duckdb_views() where view_name = $t", {"t": table}).fetchone() is not None


def query_frames(name: str, frames: Mapping[str, object]) -> pa.Table:
    """The rows `sql/<name>.sql` gives over in-memory tables (`frames`: table name -> a pandas or Arrow table),
    each other table it reads stood in empty: the columns derive writes, for data that is not
    in a warehouse (the lab grades the detector on the simulator's traces through this)."""
    with lake.open_database() as con:
        con.execute(sql_macro())
        vocabulary_tables(con)
        for table in tables.table(name).reads:
            if table in frames:
                con.register(table, frames[table])
            else:
                con.execute(f"create temp table {table} ({tables.table(table).stand_in})")
        return con.sql(sql_text(name), params=_params(name)).to_arrow_table()


def derive_run_table(
    warehouse: str | Path,
    name: str,
    run_ids: Iterable[str],
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
) -> int:
    """Derive one per-run table for `run_ids` (replacing their partitions); returns the rows written.

    `thresholds` overrides some of derive_thresholds.toml, by table and key.
    """
    if name not in RUN_TABLES:
        raise ValueError(f"{name} is not a per-run derived table ({', '.join(RUN_TABLES)})")
    run_ids = list(run_ids)
    rows = 0
    for chunk in run_chunks(run_ids):
        con = _connect(warehouse, [name], chunk)
        try:
            rows += _run_table(con, warehouse, name, chunk, thresholds, read_after=False)
        finally:
            con.close()
    return rows


def run_chunks(run_ids: list[str]) -> list[list[str]]:
    """`run_ids` in chunks of at most RUN_CHUNK runs: a per-run table's rows of a run read only that run's
    partitions, so a batch is derived chunk by chunk and its memory does not grow with the batch."""
    return [run_ids[i : i + RUN_CHUNK] for i in range(0, len(run_ids), RUN_CHUNK)]


def derive_run_tables(
    warehouse: str | Path,
    run_ids: Iterable[str],
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, int]:
    """Derive every per-run table for `run_ids` in dependency order; returns rows written per table."""
    # a table gets a view of its new partitions only where a later one reads it
    read_later = {t for name in RUN_TABLES for t in tables.table(name).reads}
    counts = dict.fromkeys(RUN_TABLES, 0)
    for chunk in run_chunks(list(run_ids)):
        con = _connect(warehouse, RUN_TABLES, chunk)
        try:
            for name in RUN_TABLES:
                counts[name] += _run_table(con, warehouse, name, chunk, thresholds, read_after=name in read_later)
        finally:
            con.close()
    lake.refresh_catalog(warehouse)
    return counts


def _fleet_table(con: duckdb.DuckDBPyConnection, warehouse: str | Path, name: str) -> int:
    if name == ERROR_TEMPLATES:  # its SQL reads what Drain3 mined from the messages
        register_line_templates(con)
    params = _params(name)
    data = con.sql(masked_sql(con, name, params), params=params).to_arrow_table()
    lake.write_fleet_table(warehouse, name, data)
    _refresh_view(con, warehouse, name)
    return data.num_rows


def derive_fleet_table(warehouse: str | Path, name: str) -> int:
    """Recompute one fleet table from the per-run tables; returns its row count."""
    if name not in FLEET_TABLES:
        raise ValueError(f"{name} is not a fleet table ({', '.join(FLEET_TABLES)})")
    with lake.fleet_lock(warehouse):
        con = _connect(warehouse, [name])
        try:
            return _fleet_table(con, warehouse, name)
        finally:
            con.close()


def derive_fleet_tables(warehouse: str | Path) -> dict[str, int]:
    """Recompute every fleet table; returns rows written per table."""
    with lake.fleet_lock(warehouse):
        con = _connect(warehouse, FLEET_TABLES)
        try:
            counts = {name: _fleet_table(con, warehouse, name) for name in FLEET_TABLES}
        finally:
            con.close()
    lake.refresh_catalog(warehouse)
    return counts
