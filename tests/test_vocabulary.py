"""The vocabularies declared in pipeline/vocabulary.py are the design card's, and every reader covers them."""

from __future__ import annotations

import re
from datetime import datetime

import pyarrow as pa

from pipeline import derive, lake, vocabulary
from pipeline.report.labels import CLASS_LABELS


def _design_table(shared_dir, heading: str) -> list[str]:
    """The backticked names in the first column of the table under `heading` in DESIGN.md."""
    text = (shared_dir / "DESIGN.md").read_text()
    section = text[text.index(heading):]
    rows = re.findall(r"^\| `(\w+)` \|", section.split("\n\n`failure_phase`")[0], flags=re.M)
    return rows


def test_failure_classes_are_the_design_cards(shared_dir):
    assert list(vocabulary.FAILURE_CLASSES) == _design_table(shared_dir, "`failure_class` of a run")


def test_stop_reasons_phases_and_anomaly_classes_are_the_design_cards(shared_dir):
    text = (shared_dir / "DESIGN.md").read_text()
    stop = text[text.index("`stop_reason` is"):].split("\n")[0]
    assert re.findall(r"`(\w+)`", stop)[1:] == list(vocabulary.STOP_REASONS)
    anomalies = text[text.index("`anomaly_class` of a step:"):].split("\n\n")[0]
    assert re.findall(r"`(\w+)`", anomalies)[1:] == [*vocabulary.ANOMALY_CLASSES, vocabulary.OTHER_ANOMALY]
    phases = text[text.index("`failure_phase`: what the run"):].split("; read from")[0]
    named = [p for p in re.findall(r"`(\w+)`", phases)[1:] if p in vocabulary.FAILURE_PHASES]
    assert set(named) == set(vocabulary.FAILURE_PHASES)


def test_every_class_has_a_plain_label():
    assert set(CLASS_LABELS) == set(vocabulary.FAILURE_CLASSES)
    assert set(vocabulary.FAILED_CLASSES) | set(vocabulary.NOT_FAILED) == set(vocabulary.FAILURE_CLASSES)


def _sql_texts() -> dict[str, str]:
    """Each sql/*.sql file's text without its comments."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "sql"
    return {p.name: re.sub(r"--[^\n]*", "", p.read_text()) for p in sorted(root.glob("*.sql"))}


def test_sql_names_only_declared_classes_and_phases():
    """Where SQL must spell a vocabulary out, every name it spells is declared in pipeline/vocabulary.py."""
    for name, text in _sql_texts().items():
        compared = re.findall(r"\bfailure_class\s*(?:=|<>|!=)\s*'(\w+)'", text)
        listed = [c for group in re.findall(r"failure_class\s+(?:not\s+)?in\s*\(([^)]*)\)", text)
                  for c in re.findall(r"'(\w+)'", group)]
        assert set(compared + listed) <= set(vocabulary.FAILURE_CLASSES), (name, set(compared + listed))
        for group in re.findall(r"failure_class\s+not\s+in\s*\(([^)]*)\)", text):
            named = set(re.findall(r"'(\w+)'", group))
            if {"completed", "interrupted"} <= named:  # "did not fail" spelled out: all of it
                assert named >= set(vocabulary.NOT_FAILED), (name, named)
    summary = _sql_texts()["run_cause.sql"]
    mapped = re.findall(r"\('\w+', '(\w+)', \d+, \d+\)", summary)
    assert mapped and set(mapped) <= set(vocabulary.FAILURE_CLASSES)
    phases = re.findall(r"\('timing(?:_s)?/\w+', '(\w+)', \d+\)", _sql_texts()["step_phases.sql"])
    assert set(phases) == set(vocabulary.FAILURE_PHASES) - {"startup"} | {"step_time"}


def test_fleet_tables_count_every_class(tmp_path):
    """fleet_daily and fleet_weekly have a count column for each failure class of the design's vocabulary, in its
    order, 0 where no run ended so, and count a hang among the failed but not a stopped run or a cut log."""
    design = ("completed", "cuda_oom", "nccl_timeout", "ray_actor_died", "host_oom_killed", "hang", "nan_divergence",
              "python_exception", "vllm_engine_error", "interrupted", "no_outcome", "unknown")
    day = datetime(2026, 11, 28, 12)
    for rid, cls in (("a", "hang"), ("b", "hang"), ("c", "interrupted"), ("d", "no_outcome"), ("e", "cuda_oom")):
        lake.write_run_table(tmp_path, "run_summary", rid, pa.table({
            "failure_class": [cls], "first_ts": [day], "last_ts": [day], "mtime": [day], "ingested_at": [day],
            "median_step_s": [10.0], "goodput": [0.5], "last_step": [3], "wall_time_s": [60.0],
            "hang_duration_s": pa.array([None], pa.float64())}))
    for table in ("fleet_daily", "fleet_weekly"):
        derive.derive_fleet_table(tmp_path, table)
        with lake.reader(tmp_path, only=(table,)) as con:
            columns = [c for (c,) in con.execute(
                "select column_name from duckdb_columns() where table_name = $t order by column_index",
                {"t": table}).fetchall()]
            [row] = con.execute(f"select runs, failed, hang, cuda_oom, interrupted, unknown from {table}").fetchall()
        assert [c for c in columns if c in design] == list(design), table
        assert row == (5, 3, 2, 1, 1, 0), table
