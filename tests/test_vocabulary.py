"""The vocabularies declared in pipeline/vocabulary.py are the design card's, and every reader covers them."""

from __future__ import annotations

import re

from pipeline import vocabulary
from pipeline.report.render import CLASS_LABELS


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
