"""A run's anomaly episodes: consecutive flagged steps with one class, explanation and their run_advice rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from pipeline.report.warehouse import by_run, columns, rows


@dataclass
class Episode:
    """A run of consecutive anomalous steps with one explanation."""

    episode_id: Any
    anomaly_class: str
    first_step: int
    last_step: int
    n_steps: int
    explanation: str
    advice: list[dict[str, Any]]


def load_episodes(con: duckdb.DuckDBPyConnection, run_ids: list[str],
                  advice: dict[str, dict[Any, list[dict[str, Any]]]]) -> dict[str, tuple[np.ndarray, list[Episode]]]:
    """Per run of `run_ids`, its flagged steps and its episodes (from step_anomalies' episode columns, else by
    adjacency), each with its run_advice rows (`advice`: run id -> episode id -> rows)."""
    flagged = by_run(rows(con, "select * from step_anomalies where list_contains($ids, run_id) and is_anomaly "
                               "order by run_id, step", {"ids": list(run_ids)}), drop=False) \
        if columns(con, "step_anomalies") else {}
    out = {}
    for rid in run_ids:
        found = flagged.get(rid, [])
        given = advice.get(rid, {})
        out[rid] = (np.array([r["step"] for r in found], dtype=float), [_episode(g, given) for g in _groups(found)])
    return out


def _groups(flagged: list[dict]) -> list[list[dict]]:
    groups: list[list[dict]] = []
    for r in flagged:
        key = r.get("episode_id")
        prev = groups[-1][-1] if groups else None
        same = prev is not None and (
            (key is not None and prev.get("episode_id") == key)
            or (key is None and prev.get("episode_id") is None and r["step"] - prev["step"] <= 1)
        )
        if same:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def _episode(g: list[dict], advice: dict[Any, list[dict[str, Any]]]) -> Episode:
    classes = [r.get("anomaly_class") or "other" for r in g]
    cls = max(set(classes), key=classes.count)
    head = g[0]
    first, last = head.get("episode_first_step"), head.get("episode_last_step")
    episode_id = head.get("episode_id")
    return Episode(
        episode_id=episode_id,
        anomaly_class=cls,
        first_step=int(first if first is not None else g[0]["step"]),
        last_step=int(last if last is not None else g[-1]["step"]),
        n_steps=len(g),
        explanation=next((r["explanation"] for r in g if r.get("explanation")), ""),
        advice=advice.get(int(episode_id), []) if episode_id is not None else [],
    )
