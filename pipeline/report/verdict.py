"""The run report's banner: its tone, headline and the one sentence a person would say about the run."""

from __future__ import annotations

import re
from typing import Any

from pipeline.report.formats import fmt_duration, fmt_num
from pipeline.report.labels import CLASS_LABELS, STOP_WORDS, TRAINING_LABELS, outcome_label

EXCEPTION_RE = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Interrupt))\b")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def verdict(summary: dict[str, Any], n_episodes: int) -> dict[str, str]:
    """Banner tone, headline and the one sentence a person would say about the run."""
    cls = summary.get("failure_class") or "unknown"
    if cls == "completed":
        tone, head, sentence = _completed(summary, n_episodes)
    elif cls == "hang":
        tone, head, sentence = _hung(summary)
    elif cls in ("interrupted", "no_outcome"):
        tone, head, sentence = "warn", CLASS_LABELS[cls], _cut_short(summary, cls)
    else:
        tone, head, sentence = "bad", outcome_label(cls, summary.get("failure_detail")), _failed(summary, cls)
    outcome = summary.get("training_outcome")
    if outcome in TRAINING_LABELS:
        # a training failure sets the verdict whatever the log's end: it leads, the ending follows
        trained = TRAINING_LABELS[outcome]
        head = trained if cls in ("completed", "no_outcome") else f"{trained}; {head}"
        sentence = (f"{trained} from step {fmt_num(summary.get('training_outcome_step'))} and had not recovered by "
                    f"step {fmt_num(summary.get('last_step'))}. {sentence}")
        tone = "bad"
    return {"tone": tone, "headline": head, "sentence": sentence + ".", "cls": cls, "training_outcome": outcome}


def _completed(s: dict[str, Any], n_episodes: int) -> tuple[str, str, str]:
    last, expected, wall = s.get("last_step"), s.get("expected_steps"), s.get("wall_time_s")
    took = f" in {fmt_duration(wall)}" if wall else ""
    if not s.get("n_steps") and not last:  # an excerpt of the run's end: no step line to count
        done = f"Completed{took}; the log shows no step, so the last step is unknown"
    elif expected:
        done = f"Completed {fmt_num(last)} of {fmt_num(expected)} steps{took}"
    else:
        done = f"Completed {fmt_num(last)} steps{took}"
    if n_episodes:
        episodes = _plural(n_episodes, "anomaly episode")
        return "warn", f"Completed with {episodes}", f"{done}; {episodes} to review"
    return "ok", "Healthy", f"{done}{'; no anomalies' if done.endswith('unknown') else ' with no anomalies'}"


def _hung(s: dict[str, Any]) -> tuple[str, str, str]:
    why = s.get("hang_reason") or "the log stops with no error"
    hung = s.get("hang_duration_s")
    where = f" in {s['failure_phase']}" if s.get("failure_phase") else ""
    for_how_long = f" for {fmt_duration(hung)}" if hung else ""
    return "bad", "Hung", f"Hung{where}{for_how_long} after step {fmt_num(s.get('last_step'))}: {why}"


def _cut_short(s: dict[str, Any], cls: str) -> str:
    where = f" in {s['failure_phase']}" if s.get("failure_phase") else ""
    of_total = f" of {fmt_num(s['expected_steps'])}" if s.get("expected_steps") else ""
    last = fmt_num(s.get("last_step"))
    if cls == "interrupted":
        return f"{STOP_WORDS.get(s.get('stop_reason'), 'Stopped')}{where} after step {last}{of_total}"
    return (f"The log ends at step {last}{of_total}{where} with no outcome: still running when archived, "
            "or stopped without a trace")


def _failed(s: dict[str, Any], cls: str) -> str:
    label = outcome_label(cls, s.get("failure_detail"))
    if cls == "python_exception":
        found = EXCEPTION_RE.search(s.get("root_cause_text") or "")
        label = found.group(1) if found else label
    where = f" in {s['failure_phase']}" if s.get("failure_phase") else ""
    at = f" at step {fmt_num(s['last_step'])}" if s.get("last_step") is not None else ""
    after = f" after {fmt_duration(s['wall_time_s'])}" if s.get("wall_time_s") else ""
    return f"{label}{where}{at}{after}"
