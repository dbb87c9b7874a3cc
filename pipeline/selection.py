"""Which runs of an archive an analysis takes: a run-id glob and a window of days, and the error for none."""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass
from pathlib import Path


@dataclass
class RunSelection:
    """Which runs of an archive to analyse: run ids matching a glob, last active within dates (inclusive)."""

    include: str | None = None
    since: dt.date | None = None
    until: dt.date | None = None

    def keeps(self, entry) -> bool:
        """Whether the archive entry is selected (its last activity is its modification time)."""
        day = dt.datetime.fromtimestamp(entry.mtime).date()
        return ((self.include is None or fnmatch.fnmatchcase(entry.run_id, self.include))
                and (self.since is None or day >= self.since) and (self.until is None or day <= self.until))


class NoRunsError(ValueError):
    """The archive holds no run, or the selection keeps none of its runs: nothing to analyse or report."""


def no_runs_message(archive: str | Path, found, include: set[str] | None, select: RunSelection | None) -> str:
    """What was looked for and what was found instead, for an analysis that found no run to analyse."""
    looked = [f"runs in {archive}"]
    if include is not None:
        looked.append(f"run_id {' or '.join(sorted(include))}")
    if select is not None and select.include is not None:
        looked.append(f"run_id matching {select.include!r}")
    if select is not None and select.since is not None:
        looked.append(f"last active on or after {select.since.isoformat()}")
    if select is not None and select.until is not None:
        looked.append(f"last active on or before {select.until.isoformat()}")
    n_runs = len(found.entries) + found.n_unread
    seen = f"the archive holds {n_runs} run entr{'y' if n_runs == 1 else 'ies'}"
    if found.skipped:
        seen += f" and {len(found.skipped)} other file{'s' if len(found.skipped) != 1 else ''} ({', '.join(sorted(found.skipped)[:5])})"
    problems = f"; archive problems: {'; '.join(found.errors)}" if found.errors else ""
    return f"no run to analyse: looked for {', '.join(looked)}; {seen}{problems}"
