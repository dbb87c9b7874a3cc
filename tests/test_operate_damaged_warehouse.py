"""A warehouse file cut short (a full disk, a kill during a copy) is found and healed by the next `analyze`: a
damaged per-run partition counts as missing (its run is analysed again), a damaged fleet table or model is
rebuilt; no analysis crashes on one."""

from __future__ import annotations

import json

import duckdb
import pyarrow.parquet as pq
from operate_support import simulate

from pipeline.analysis import analyze_archive
from pipeline.detect.warehouse import load_model, model_paths


def _cut(path) -> None:
    """Keep the first half of a file, as a write stopped by a full disk leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _rows(path) -> list[tuple]:
    return sorted(duckdb.connect().execute("select * from read_parquet($f)", {"f": str(path)}).fetchall(), key=str)


def test_damaged_partitions_fleet_tables_and_model_are_healed(tmp_path):
    labels = simulate(tmp_path / "sim", runs=3, seed=17)["runs"]
    archive, warehouse, reports = tmp_path / "sim" / "archive", tmp_path / "warehouse", tmp_path / "reports"
    first = analyze_archive(archive, warehouse, reports)
    assert sorted(first.run_ids) == sorted(labels)
    a, b, c = sorted(labels)
    part = "{}/run_id={}/part-0.parquet".format
    summary_before = _rows(warehouse / part("run_summary", b))
    baselines_before = _rows(warehouse / "run_baselines.parquet")

    # a cut `runs` partition (read first, at the start of every analysis) and a cut derived partition
    _cut(warehouse / part("runs", a))
    _cut(warehouse / part("run_summary", b))
    again = analyze_archive(archive, warehouse, reports)
    assert (sorted(again.run_ids), again.unchanged) == ([a, b], [c])
    assert pq.read_table(warehouse / part("runs", a)).num_rows == 1
    assert _rows(warehouse / part("run_summary", b)) == summary_before
    assert again.fleet_report is not None

    # a cut fleet table, no run changed: rebuilt with the same rows
    _cut(warehouse / "run_baselines.parquet")
    third = analyze_archive(archive, warehouse, reports)
    assert third.run_ids == [] and sorted(third.unchanged) == sorted(labels)
    assert _rows(warehouse / "run_baselines.parquet") == baselines_before

    # a cut model: --force fits it again rather than failing on it
    model, meta = model_paths(warehouse)
    assert load_model(warehouse) is not None
    _cut(model)
    forced = analyze_archive(archive, warehouse, reports, force=True)
    assert sorted(forced.run_ids) == sorted(labels)
    assert load_model(warehouse) is not None
    assert json.loads(meta.read_text())["training"]["n_runs"] == 3
