"""The sampled generations a run report shows: run_samples' rows in step order, each with why it was
picked, its cues in plain words, and the anomaly episode it sits in or next to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from pipeline.report.warehouse import by_run, rows

MAX_SHOWN = 24
# steps either side of an anomaly episode whose samples count as around it
NEAR_EPISODE = 2
PROMPT_TAIL = 600
RESPONSE_HEAD, RESPONSE_TAIL = 1800, 1200
CUE_LABELS = {
    "repetition": "repeats itself",
    "cut_at_max_length": "cut at the length limit",
    "empty_answer": "empty answer",
    "reward_without_answer": "rewarded without the reference answer",
    "answer_without_reward": "reference answer given, no reward",
}
PICK_LABELS = {"best": "best score", "worst": "worst score", "cue": "cue"}


@dataclass
class Sample:
    """One sampled generation as the report shows it (long texts shortened in the middle)."""

    step: int
    score: float | None
    ground_truth: str | None
    prompt: str
    response: str
    response_chars: int
    cues: list[str]
    picked: list[str]
    range_steps: tuple[int, int]
    episode: str | None
    where: str


@dataclass
class RunSamples:
    """The samples a run report shows, and how many the log printed in all."""

    shown: list[Sample]
    printed: int

    def __bool__(self) -> bool:
        return bool(self.shown)


def shorten(text: str | None, head: int, tail: int) -> str:
    """`text` with its middle replaced by a note of how much was left out, when longer than head + tail."""
    text = text or ""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n… [{len(text) - head - tail:,} characters not shown] …\n{text[-tail:]}"


def _episode_near(step: int, episodes: Sequence[Any]) -> str | None:
    for e in episodes:
        if e.first_step - NEAR_EPISODE <= step <= e.last_step + NEAR_EPISODE:
            return e.anomaly_class
    return None


def load_samples(con: duckdb.DuckDBPyConnection,
                 episodes: dict[str, Sequence[Any]]) -> dict[str, RunSamples]:
    """Per run of `episodes` (run id: its anomaly episodes), its picked samples to show (at most MAX_SHOWN:
    those around anomaly episodes and with cues first, then best and worst), in step order, and how many
    samples the log printed in all."""
    try:
        found = by_run(rows(con, "select * from run_samples where list_contains($ids, run_id) "
                                 "order by run_id, sample_no", {"ids": list(episodes)}), drop=False)
    except duckdb.CatalogException:
        return {rid: RunSamples([], 0) for rid in episodes}
    return {rid: _shown(found.get(rid, []), near) for rid, near in episodes.items()}


def _shown(rows: list[dict[str, Any]], episodes: Sequence[Any]) -> RunSamples:
    if not rows:
        return RunSamples([], 0)
    samples = [
        Sample(
            step=int(r["step"]),
            score=r["score"],
            ground_truth=r["ground_truth"],
            prompt=("…" + r["prompt"][-PROMPT_TAIL:]) if len(r["prompt"] or "") > PROMPT_TAIL else (r["prompt"] or ""),
            response=shorten(r["response"], RESPONSE_HEAD, RESPONSE_TAIL),
            response_chars=int(r["response_chars"]),
            cues=[CUE_LABELS.get(c, c) for c in r["cues"]],
            picked=[PICK_LABELS.get(p, p) for p in r["picked_for"] if p != "cue"],
            range_steps=(int(r["range_first_step"]), int(r["range_last_step"])),
            episode=_episode_near(int(r["step"]), episodes),
            where=f"{r['file']}:{r['line_no']}",
        )
        for r in rows
    ]
    order = sorted(range(len(samples)), key=lambda i: (samples[i].episode is None, not samples[i].cues, i))
    shown = sorted(order[:MAX_SHOWN])
    return RunSamples([samples[i] for i in shown], int(rows[0]["run_samples"]))
