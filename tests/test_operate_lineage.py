"""Every table a SQL file reads is an upstream dep of its asset, so parallel executors order steps right."""

import re

from dagster import AssetKey
from operate_support import ROOT

from pipeline.defs.definitions import defs
from pipeline.tables import names

TABLES = set(names())


def test_sql_reads_only_declared_upstreams():
    graph = defs.get_repository_def().asset_graph
    for sql in sorted((ROOT / "sql").glob("*.sql")):
        text = re.sub(r"--[^\n]*", "", sql.read_text())
        read = {name for name in re.findall(r"\b(?:from|join)\s+([a-z_]+)", text, flags=re.I) if name in TABLES}
        read.discard(sql.stem)
        deps = {k.to_user_string() for k in graph.get(AssetKey(sql.stem)).parent_keys}
        assert read <= deps, f"{sql.name} reads {sorted(read - deps)} without depending on them"
