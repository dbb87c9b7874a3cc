"""DuckDB connections: opened in one module (pipeline/lake.py), and those that read the warehouse closed when
the reading is done."""

import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipeline import lake, quality
from pipeline.alerts import runs_needing_attention

PIPELINE = Path(__file__).resolve().parents[1] / "pipeline"


def test_only_the_lake_opens_a_database():
    """No module of pipeline/ but lake.py calls duckdb.connect: every reader goes through lake.reader."""
    opening = re.compile(r"\bduckdb\.connect\(")
    found = sorted(str(p.relative_to(PIPELINE)) for p in PIPELINE.rglob("*.py") if opening.search(p.read_text()))
    assert found == ["lake.py"]


@pytest.fixture
def opened(monkeypatch):
    """Every connection lake opens during the test."""
    cons = []
    real = lake.open_database

    def recording(*args, **kwargs):
        cons.append(real(*args, **kwargs))
        return cons[-1]

    monkeypatch.setattr(lake, "open_database", recording)
    return cons


def _closed(con) -> bool:
    try:
        con.execute("select 1")
    except duckdb.ConnectionException:
        return True
    return False


def test_warehouse_readers_close_their_connections(tmp_path, opened):
    """The data-quality rules and the attention query close what they open, with tables or without."""
    lake.write_run_table(tmp_path, "runs", "r1", pa.table({"n_lines_read": [2]}))
    lake.write_run_table(tmp_path, "log_lines", "r1", pa.table({"line_no": [1, 2]}))
    lake.write_run_table(tmp_path, "step_metrics", "r1", pa.table({"step": [1, 3], "segment": [0, 0]}))
    assert quality.lines_conserved(tmp_path, ["r1"]) == {}
    assert quality.steps_contiguous(tmp_path, ["r1"]) == {"r1": [[1, 3]]}
    assert quality.contract_violations(tmp_path, "runs", ["r1"]) == ["n_bytes", "n_files", "n_lines", "source_path"]
    assert runs_needing_attention(tmp_path, ["r1"]) == []
    assert quality.lines_conserved(tmp_path / "empty", ["r1"]) == {"r1": {"error": "runs or log_lines missing"}}
    assert len(opened) == 5
    assert all(_closed(con) for con in opened)


def test_a_connection_outlives_its_database_leaving_the_cache(tmp_path):
    """Databases opened with a config are their connection's own, and one opened before others still works;
    each open of the kept database is a connection of its own (its temporary views are not another's)."""
    first = lake.open_database(config={"memory_limit": "100MB"})
    first.execute("create temp view mine as select 7 as x")
    for n in range(5):
        with lake.open_database(config={"temp_directory": str(tmp_path / str(n))}) as con:
            assert con.execute("select 1").fetchone() == (1,)
    assert first.execute("select x from mine").fetchone() == (7,)
    first.close()
    with lake.open_database() as one, lake.open_database() as two:
        one.execute("create temp view only_here as select 1 as x")
        with pytest.raises(duckdb.CatalogException):
            two.execute("select * from only_here")


def test_released_databases_are_not_opened_again_and_their_connections_still_work():
    """After `release_databases` an open starts a new database (a table made in the old one is not there), and a
    connection opened before the release goes on working; with a config each open has a database of its own."""
    before = lake.open_database()
    before.execute("create table kept_here as select 3 as x")
    with lake.open_database() as same:
        assert same.execute("select x from kept_here").fetchone() == (3,)
    lake.release_databases()
    with lake.open_database() as after, pytest.raises(duckdb.CatalogException):
        after.execute("select x from kept_here")
    assert before.execute("select x from kept_here").fetchone() == (3,)
    before.close()
    with lake.open_database(config={"threads": 1}) as own:
        own.execute("create table own_table as select 1 as x")
        with lake.open_database(config={"threads": 1}) as other, pytest.raises(duckdb.CatalogException):
            other.execute("select x from own_table")
