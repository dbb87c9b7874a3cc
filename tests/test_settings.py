"""Each VERL_HEALTH_* setting is declared once (pipeline/settings.py), documented, and read when used."""

import re
from pathlib import Path

from pipeline import settings

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_the_code_names_is_a_declared_setting():
    named = {m for p in (ROOT / "pipeline").rglob("*.py") for m in re.findall(r"VERL_HEALTH_[A-Z_]*[A-Z]\b", p.read_text())}
    assert named and named <= set(settings.SETTINGS), sorted(named - set(settings.SETTINGS))


def test_no_setting_is_read_from_os_environ():
    readers = [str(p.relative_to(ROOT)) for p in (ROOT / "pipeline").rglob("*.py")
               if re.search(r"os\.environ(\.get)?\(?\[?[\"']VERL_HEALTH_", p.read_text())]
    assert readers == []


def test_operations_doc_lists_the_settings():
    text = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"<!-- settings:begin -->\n(.*?)\n<!-- settings:end -->", text, re.S)
    assert block and block.group(1) == settings.markdown(), "paste `python -m pipeline.settings` into docs/operations.md"


def test_a_setting_is_its_variable_or_its_default(monkeypatch):
    monkeypatch.delenv("VERL_HEALTH_REFIT_DAYS", raising=False)
    assert settings.setting("VERL_HEALTH_REFIT_DAYS") == "7"
    monkeypatch.setenv("VERL_HEALTH_REFIT_DAYS", "3")
    assert settings.setting("VERL_HEALTH_REFIT_DAYS") == "3"


def test_env_example_names_every_setting_and_no_other():
    """.env.example sets (or shows, commented out) each declared setting once, and names no VERL_HEALTH_*
    variable that is not one (in a comment either)."""
    text = (ROOT / ".env.example").read_text()
    assigned = re.findall(r"^#?\s*(VERL_HEALTH_\w+)=", text, re.M)
    mentioned = set(re.findall(r"VERL_HEALTH_\w+", text))
    assert sorted(mentioned - set(settings.SETTINGS)) == [], "names a setting that does not exist"
    assert sorted(set(settings.SETTINGS) - set(assigned)) == [], "misses a setting"
    assert len(assigned) == len(set(assigned)), "sets a setting twice"
