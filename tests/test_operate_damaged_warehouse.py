"""A warehouse file cut short (a full disk, a kill during a copy) is found and healed by the next `analyze`: a
damaged per-run partition counts as missing (its run is analysed again), a damaged fleet table or model is
rebuilt; no analysis crashes on one."""

from __future__ import annotations

import json

import duckdb
import pyarrow.parquet as pq
from operate_support import set_age, simulate, write_run

from pipeline.defs.analysis import analyze_archive
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


def test_what_killed_writes_left_is_swept_once_stale(tmp_path):
    """Staging folders, partitions moved aside, ingest scratch and temporary files that a kill left an hour ago
    or more are removed by the next `analyze`; one being written now (changed a minute ago) is left alone."""
    write_run(tmp_path / "archive", "run-a", steps=4)
    warehouse = tmp_path / "warehouse"
    analyze_archive(tmp_path / "archive", warehouse, tmp_path / "reports")
    hexes = iter(f"{i:x}" * 32 for i in range(1, 10))
    stale = [warehouse / "log_lines" / f".staging-{next(hexes)}", warehouse / "run_summary" / ".old-run_id=run-a-0123abcd",
             warehouse / ".ingest-k2j3h4_x", warehouse / f".warehouse.duckdb.{next(hexes)}.tmp",
             warehouse / f".run_baselines.parquet.{next(hexes)}.tmp"]
    live = warehouse / "step_metrics" / f".staging-{next(hexes)}"
    for path in [*stale, live]:
        if path.name.endswith(".tmp"):
            path.write_bytes(b"half a file")
        else:
            (path / "run_id=run-a").mkdir(parents=True)
            (path / "run_id=run-a" / "part-0.parquet").write_bytes(b"PAR1 half")
    for path in stale:
        set_age(path, 2 * 3600)
    set_age(live, 60)
    again = analyze_archive(tmp_path / "archive", warehouse, tmp_path / "reports")
    assert again.unchanged == ["run-a"]
    assert [p for p in stale if p.exists()] == [] and (live / "run_id=run-a" / "part-0.parquet").is_file()
