"""The table registry is the one list: the SQL files, the assets, the docs and the design card agree with it."""

import re
from pathlib import Path

import pytest
from dagster import AssetKey

from pipeline import tables
from pipeline.defs.definitions import defs

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT.parent / "shared" / "DESIGN.md"


def test_every_sql_file_is_a_declared_sql_table_and_back():
    files = {p.stem for p in (ROOT / "sql").glob("*.sql")}
    assert files == set(tables.sql_tables())


def test_every_sql_file_is_short_enough_to_read_at_once():
    """One derived table per file, each a size a reader takes in at once: intermediate tables, not longer files."""
    lengths = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "sql").glob("*.sql")}
    assert len(lengths) >= 19
    assert {name: n for name, n in lengths.items() if n > 300} == {}


def test_tables_read_only_tables_declared_before_them():
    seen = set()
    for t in tables.TABLES:
        assert t.layer in tables.LAYERS, t.name
        assert set(t.reads) <= seen | {tables.MODEL}, (t.name, set(t.reads) - seen)
        seen.add(t.name)


def test_every_table_is_an_asset_with_its_reads_as_deps_and_partitioned_when_per_run():
    graph = defs.get_repository_def().asset_graph
    for t in tables.TABLES:
        node = graph.get(AssetKey(t.name))
        assert {k.to_user_string() for k in node.parent_keys} == set(t.reads), t.name
        assert (node.partitions_def is not None) == t.per_run, t.name
        if t.contract:
            assert AssetKey(t.name) in {c.asset_key for c in node.check_keys}, t.name


def test_docs_list_the_registry():
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- tables:begin -->\n(.*?)\n<!-- tables:end -->", text, re.S)
    assert block and block.group(1) == tables.markdown(), "paste `python -m pipeline.tables` into docs/architecture.md"


def _without_descriptions(text: str) -> str:
    """`text` without the parenthesised description after each `column` (its backticked values are no columns)."""
    out, i = "", 0
    while m := re.compile(r"`\w+` \(").search(text, i):
        out += text[i:m.end() - 1]
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
    return out + text[i:]


def _design_contracts() -> dict[str, set[str]]:
    """The design card's table contract: `- `name`: `col` (description), `col`, ...` lines."""
    found = {}
    for line in DESIGN.read_text().splitlines():
        m = re.match(r"- `(\w+)`(?: \(fleet table\))?: (.*)", line)
        if m and "`run_id`" in m.group(2) or (m and m.group(1) == "error_templates"):
            found[m.group(1)] = set(re.findall(r"`(\w+)`", _without_descriptions(m.group(2))))
    return found


@pytest.mark.skipif(not DESIGN.is_file(), reason="the shared design card is not beside this checkout")
def test_contract_columns_are_the_design_cards():
    design = _design_contracts()
    assert {"runs", "log_lines", "step_metrics", "step_phases", "run_events", "step_anomalies", "run_summary",
            "run_advice"} <= set(design)
    for name, columns in design.items():
        if name not in tables.BY_NAME:
            continue
        if name == "step_phases":
            # the card's `step` timer is `step_time`: `step` is already the step number
            columns = columns | {"step_time"}
        assert tables.contract(name) == columns, (name, columns ^ tables.contract(name))


def test_model_readers_come_after_the_model():
    assert tables.needs_model("step_anomalies")
    assert not any(tables.needs_model(n) for n in ("runs", "run_summary", "fleet_daily"))
