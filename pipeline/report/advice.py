"""What the fixes knowledge base says about a failure or anomaly class, and where it says it."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXES_FILE = Path(__file__).resolve().parents[1] / "knowledge" / "fixes.json"
VERL_DOCS = "https://verl.readthedocs.io/en/latest/search.html?q="
# the knowledge base also cites the team's internal articles by number and its own design notes: a reader can
# open neither, so the reports never name them
INTERNAL_RE = re.compile(r"^(?:seed(?: articles?)? )?\d{3}\b|\.md\b")


@functools.cache
def _fixes() -> dict[str, Any]:
    with open(FIXES_FILE, encoding="utf-8") as f:
        return json.load(f)


def _advice_lookup():
    """`advice_for(kind, cls)` over the fixes knowledge base, or None while it is not there.

    Reads the JSON behind `pipeline.detect.advice_for` directly: importing the detect package
    pulls in scikit-learn, which costs seconds per report process.
    """
    if not FIXES_FILE.is_file():
        return None
    return lambda kind, cls: _fixes().get(kind, {}).get(cls)


@dataclass
class Source:
    """One cited source in words a reader knows, with a link where there is one."""

    text: str
    href: str | None = None


def sources(cited: list[str] | str | None) -> list[Source]:
    """The knowledge base's public citations as sources a reader can follow ("verl docs: rollout memory" links
    verl's documentation); internal articles and files ("000 §3.1", "DESIGN.md vocabulary") are left out."""
    parts = cited if isinstance(cited, list | tuple) else re.split(r";\s*", cited or "")
    out = []
    for part in (p.strip() for p in parts):
        if not part or INTERNAL_RE.search(part):
            continue
        if part.startswith("verl docs:"):
            topic = part.removeprefix("verl docs:").strip()
            out.append(Source(f"verl documentation: {topic}", VERL_DOCS + re.sub(r"\s+", "+", topic)))
        else:
            out.append(Source(part))
    return out


@dataclass
class Advice:
    """What the fixes knowledge base says about a class, plus free-text advice a table row carries."""

    summary: str = ""
    causes: list[str] = field(default_factory=list)
    changes: list[dict[str, str]] = field(default_factory=list)
    source: list[Source] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.summary or self.causes or self.changes or self.notes)

    @property
    def first_change(self) -> str:
        """The first thing to try, in one line: a configuration change, else the summary or a note."""
        for c in self.changes:
            if c.get("key") not in (None, "", "-"):
                return f"{c['key']} → {c.get('to', '')}"
        return self.summary or (self.notes[0] if self.notes else "")


def advice_entry(kind: str, cls: str | None, given: Any = None, config: dict | None = None) -> Advice:
    """Advice for a 'failure' or 'anomaly' class from the fixes knowledge base; `given` is a row's own advice.

    With the run's `config`, the entry's `changes_if` changes for the flags the run has on come first
    (KL control acts through the reward or through the actor's loss, as the run chose).
    Degrades to the row's advice, or to nothing, when the knowledge base is not installed.
    """
    notes = _as_lines(given)
    entry = _entry(kind, cls)
    if not isinstance(entry, dict):
        return Advice(notes=notes + _as_lines(entry))
    chosen = [c for flag, extra in (entry.get("changes_if") or {}).items() if _flag_on(config, flag) for c in extra]
    changes = [
        {k: str(v) for k, v in c.items()} if isinstance(c, dict) else {"key": str(c), "to": "", "why": ""}
        for c in [*chosen, *(entry.get("changes") or [])]
    ]
    return Advice(
        summary=str(entry.get("summary") or ""),
        causes=[str(c) for c in entry.get("causes") or []],
        changes=changes,
        source=sources([str(x) for x in entry.get("source") or []]),
        notes=[n for n in notes if not n.startswith("Try: ")] if changes else notes,
    )


def _entry(kind: str, cls: str | None) -> Any:
    lookup = _advice_lookup() if cls else None
    if lookup is None:
        return None
    try:
        return lookup(f"{kind}_class", cls)
    except (LookupError, ValueError, OSError):
        return None


def run_config(summary: dict[str, Any]) -> dict | None:
    """The run's config dump (run_summary carries it as JSON), or None."""
    try:
        return json.loads(summary.get("config_json") or "null")
    except (TypeError, ValueError):
        return None


def _flag_on(config: dict | None, dotted: str) -> bool:
    """Whether the dotted config key is true in `config`."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return False
        node = node.get(part)
    return node is True


def _as_lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list | tuple):
        return [line for item in value for line in _as_lines(item)]
    return [str(value)]
