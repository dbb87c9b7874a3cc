"""A W&B run folder's side files, read as facts of the run whose console W&B captured in `output.log`.

`wandb/run-<date>_<time>-<id>/files/` (or `offline-run-...`; `files/` alone when the run entry is the
W&B run folder itself) holds, beside `output.log` and `config.yaml` (read by config.py):
- `wandb-metadata.json`: `startedAt` (UTC, ISO 8601, with or without a `Z`), `host`, `program`, `args`,
  `gpu`, `gpu_count`, ...;
- `wandb-summary.json`: the last value W&B received of every logged key, and its own bookkeeping:
  `_step`, `_runtime` (seconds), `_timestamp` (epoch seconds of the last log), `_wandb.runtime`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

SIDE_FILE = re.compile(r"(?:^|/)(wandb-metadata|wandb-summary)\.json$")
RUN_FOLDER = re.compile(r"(?:^|/)((?:offline-)?run-[^/]+)/files/")
# the run's binary transaction log (run-<id>.wandb): records, not lines
RECORDS = re.compile(r"(?:^|/)run-\w+\.wandb$")
MAX_BYTES = 8 << 20
# what the `runs` table gains from a W&B run folder (null without one)
RUN_FIELDS = pa.schema([
    ("wandb_run", pa.string()),  # the run folder's name, run-<date>_<time>-<id>
    ("host", pa.string()),
    ("started_at", pa.timestamp("us")),
    ("runtime_s", pa.float64()),
    ("final_step", pa.int64()),
    ("final_metrics_json", pa.string()),
])


INT64_MAX = 2**63 - 1


def _utc(text: Any) -> datetime | None:
    """A naive UTC datetime from W&B's ISO 8601 text (`2025-11-04T19:23:11.445593Z` or without `Z`); None for
    text that is no such time or one out of datetime's range in UTC (`0001-01-01T00:00:00+01:00`)."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return when.astimezone(UTC).replace(tzinfo=None) if when.tzinfo else when
    except (ValueError, OverflowError):
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past 1.8e308
        return None


@dataclass
class WandbFiles:
    """The side files of a W&B run folder, as they are read."""

    found: bool = False
    run_folder: str | None = None
    metadata: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # values run_facts could not take, each kept as null

    @staticmethod
    def wants(name: str) -> bool:
        """Whether `name` is a W&B metadata or summary file."""
        return SIDE_FILE.search(name) is not None

    def read(self, name: str, data: bytes, problems: list[str]) -> None:
        """Take in one side file's bytes (the first MAX_BYTES of it)."""
        if len(data) >= MAX_BYTES:
            problems.append(f"{name}: larger than {MAX_BYTES >> 20} MB: not read as W&B run facts")
            return
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(f"{name}: W&B file could not be parsed ({type(exc).__name__})")
            return
        if not isinstance(doc, dict):
            problems.append(f"{name}: W&B file holds no JSON object: not read")
            return
        kind = SIDE_FILE.search(name).group(1)
        self.found = True
        folder = RUN_FOLDER.search(name)
        self.run_folder = folder.group(1) if folder else self.run_folder
        if kind == "wandb-metadata":
            self.metadata = doc
        else:
            self.summary = doc

    def _bad(self, what: str, value: Any) -> None:
        note = f"W&B {what} {str(value)[:40]!r} is out of range: kept as null"
        if note not in self.problems:
            self.problems.append(note)

    @property
    def started_at(self) -> datetime | None:
        """When W&B started the run (UTC)."""
        text = self.metadata.get("startedAt")
        when = _utc(text)
        if when is None and text is not None:
            self._bad("startedAt", text)
        return when

    @property
    def runtime_s(self) -> float | None:
        """Seconds the run lasted, as W&B counted them (null when no duration can be that long)."""
        runtime = _number(self.summary.get("_runtime"))
        inner = self.summary.get("_wandb")
        if runtime is None and isinstance(inner, dict):
            runtime = _number(inner.get("runtime"))
        try:
            timedelta(seconds=runtime or 0)
        except OverflowError:
            self._bad("_runtime", runtime)
            return None
        return runtime

    @property
    def ended_at(self) -> datetime | None:
        """The last log W&B received (`_timestamp`), else the start plus the runtime (UTC)."""
        stamp = _number(self.summary.get("_timestamp"))
        if stamp is not None and math.isfinite(stamp):
            try:
                return datetime.fromtimestamp(stamp, UTC).replace(tzinfo=None)
            except (OverflowError, ValueError, OSError):
                self._bad("_timestamp", stamp)
        started, runtime = self.started_at, self.runtime_s
        if started is not None and runtime is not None:
            try:
                return started + timedelta(seconds=runtime)
            except OverflowError:
                self._bad("_runtime", runtime)
        return None

    def final_metrics(self) -> dict[str, float]:
        """The last value of every logged metric (W&B's own `_` keys left out)."""
        return {k: float(v) for k, v in sorted(self.summary.items())
                if not k.startswith("_") and _number(v) is not None}

    def final_metrics_json(self) -> str | None:
        """final_metrics as JSON, a NaN or infinite last value as null."""
        final = {k: v if math.isfinite(v) else None for k, v in self.final_metrics().items()}
        return json.dumps(final, sort_keys=True) if final else None

    def run_facts(self) -> dict[str, Any]:
        """The `runs` columns of RUN_FIELDS (all null when the run has no W&B folder)."""
        if not self.found:
            return {f.name: None for f in RUN_FIELDS}
        step = self.summary.get("_step")
        if isinstance(step, int) and not isinstance(step, bool) and not -INT64_MAX <= step <= INT64_MAX:
            self._bad("_step", step)
            step = None
        host = self.metadata.get("host")
        return {
            "wandb_run": self.run_folder,
            "host": str(host) if host is not None else None,
            "started_at": self.started_at,
            "runtime_s": self.runtime_s,
            "final_step": int(step) if isinstance(step, int) and not isinstance(step, bool) else None,
            "final_metrics_json": self.final_metrics_json(),
        }
