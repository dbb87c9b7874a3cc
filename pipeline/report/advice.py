"""Advice as the reports show it: run_advice rows (sql/run_advice.sql), split by what they answer, with sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Source:
    """One cited source: a public page, named by its site and path."""

    text: str
    href: str | None = None


def sources(cited: str | None) -> list[Source]:
    """A run_advice row's source as a link a reader can follow."""
    if not cited:
        return []
    parts = urlsplit(cited)
    if parts.scheme not in ("http", "https"):
        return [Source(cited)]
    return [Source(f"{parts.netloc}{parts.path.rstrip('/')}", cited)]


def by_episode(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[Any, list[dict[str, Any]]]]:
    """A run's run_advice rows: those on how the run ended (episode_id null), and those of each anomaly episode."""
    ending, episodes = [], {}
    for r in rows:
        if r.get("episode_id") is None:
            ending.append(r)
        else:
            episodes.setdefault(int(r["episode_id"]), []).append(r)
    return ending, episodes

