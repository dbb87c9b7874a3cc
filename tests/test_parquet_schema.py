"""A table's partitions are read by name only where their schemas differ, and the footer's schema bytes agree
with pyarrow's own reading of every file's schema."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import lake, parquet_schema


def _write(path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


def _duckdb_write(path, sql: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    duckdb.sql(f"copy ({sql}) to '{path}' (format parquet, compression zstd)")


@pytest.fixture
def files(tmp_path):
    """Files of several schemas, written by pyarrow and by DuckDB: nested, wide, dictionary-encoded, empty."""
    out = {}
    wide = {f"c{i}": pa.array([float(i)] * 3) for i in range(40)}
    variants = {
        "ints": pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x", "y"]}),
        "ints_again": pa.table({"a": pa.array([7], pa.int64()), "b": ["z" * 500]}),
        "ints_empty": pa.table({"a": pa.array([], pa.int64()), "b": pa.array([], pa.string())}),
        "int32": pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}),
        "renamed": pa.table({"a": pa.array([1], pa.int64()), "c": ["x"]}),
        "reordered": pa.table({"b": ["x"], "a": pa.array([1], pa.int64())}),
        "extra": pa.table({"a": pa.array([1], pa.int64()), "b": ["x"], "d": [True]}),
        "nested": pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([[{"k": "v", "n": 1}]])}),
        "wide": pa.table(wide),
    }
    for name, table in variants.items():
        out[name] = tmp_path / f"{name}.parquet"
        _write(out[name], table)
    out["duck_ints"] = tmp_path / "duck_ints.parquet"
    _duckdb_write(out["duck_ints"], "select range::bigint as a, 'r' || range as b from range(1)")
    out["duck_ints_again"] = tmp_path / "duck_ints_again.parquet"
    _duckdb_write(out["duck_ints_again"], "select range::bigint as a, 'r' || range as b from range(5000)")
    out["duck_map"] = tmp_path / "duck_map.parquet"
    _duckdb_write(out["duck_map"], "select map(['k'], [1]) as m, [1.5, 2.5] as l, {'s': 1} as st")
    return out


def test_equal_keys_are_equal_schemas_as_pyarrow_reads_them(files):
    """Every pair of files: the keys agree where pyarrow says the Parquet schemas are equal, and differ where
    it says they are not (files of one writer with the same columns have equal keys)."""
    keys = {name: parquet_schema.schema_key(path) for name, path in files.items()}
    assert None not in keys.values()
    schemas = {name: pq.read_metadata(path).schema for name, path in files.items()}
    for a in files:
        for b in files:
            assert (keys[a] == keys[b]) == schemas[a].equals(schemas[b]), (a, b)
    assert keys["ints"] == keys["ints_again"] == keys["ints_empty"]
    assert keys["duck_ints"] == keys["duck_ints_again"]
    assert len({keys[n] for n in ("ints", "int32", "renamed", "reordered", "extra", "nested")}) == 6


def test_a_file_that_is_not_whole_has_no_key(tmp_path, files):
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(files["ints"].read_bytes()[:-20])
    assert parquet_schema.schema_key(cut) is None
    assert parquet_schema.schema_key(tmp_path / "gone.parquet") is None
    assert not parquet_schema.same_schema([files["ints"], cut])


def test_a_rewritten_file_is_read_again(tmp_path):
    path = tmp_path / "p.parquet"
    _write(path, pa.table({"a": [1]}))
    first = parquet_schema.schema_key(path)
    _write(path, pa.table({"a": [1], "b": ["x"]}))
    assert parquet_schema.schema_key(path) != first


def _partition(warehouse, run_id: str, table: pa.Table) -> None:
    _write(lake.run_partition_dir(warehouse, "step_metrics", run_id) / "part-0.parquet", table)


def test_partitions_of_other_schemas_are_read_by_name(tmp_path):
    """An older partition lacks a column a newer one has, another has a column's type changed: every column
    and value is read, whatever file comes first (read by position, the first file's columns would win)."""
    wh = tmp_path / "wh"
    _partition(wh, "a-old", pa.table({"step": pa.array([1], pa.int64()), "value": [0.5]}))
    _partition(wh, "b-new", pa.table({"step": pa.array([2], pa.int64()), "value": [1.25], "segment": pa.array([3], pa.int32())}))
    src = lake.table_source(wh, "step_metrics", ["a-old", "b-new"])
    assert "union_by_name=true" in src
    got = duckdb.sql(f"select run_id, step, value, segment from {src} order by run_id").fetchall()
    assert got == [("a-old", 1, 0.5, None), ("b-new", 2, 1.25, 3)]


def test_partitions_of_one_schema_are_read_by_position(tmp_path):
    wh = tmp_path / "wh"
    for i, run in enumerate(("r1", "r2", "r3")):
        _partition(wh, run, pa.table({"step": pa.array([i], pa.int64()), "value": [i / 4]}))
    src = lake.table_source(wh, "step_metrics", ["r1", "r2", "r3"])
    assert "union_by_name=false" in src
    got = duckdb.sql(f"select run_id, step, value from {src} order by run_id").fetchall()
    assert got == [("r1", 0, 0.0), ("r2", 1, 0.25), ("r3", 2, 0.5)]
