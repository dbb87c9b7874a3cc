"""The vocabularies declared in pipeline/vocabulary.py are the design card's, and every reader covers them."""

from __future__ import annotations

import re

from pipeline import vocabulary
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


def test_fleet_tables_count_every_class():
    """fleet_daily and fleet_weekly have a count column for each failure class of the vocabulary."""
    for name in ("fleet_daily.sql", "fleet_weekly.sql"):
        counted = re.findall(r"filter \(where (?:\w+\.)?failure_class = '(\w+)'\) as (\w+)", _sql_texts()[name])
        assert {c for c, col in counted if c == col} == set(vocabulary.FAILURE_CLASSES), name
