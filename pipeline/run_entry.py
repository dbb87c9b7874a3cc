"""The archive entry of one run, named by its path or its run_id, and the folder to analyse it from."""

from __future__ import annotations

from pathlib import Path


def resolve_entry(run: str, archive_root: str | Path, quiet_period_s: int = 600):
    """The archive entry for a path to a run (folder, .tar.gz, .gz) or a run_id under `archive_root`."""
    from pipeline.ingest import discover_runs, run_id_for

    path = Path(run)
    if path.exists():
        found = discover_runs(path.parent, quiet_period_s=0, only={run_id_for(path.name)})
        for entry in found.entries:
            if Path(entry.path).resolve() == path.resolve():
                return entry
        raise ValueError(f"{run} is not a run entry that verl-health can read: {found.errors}")
    found = discover_runs(archive_root, quiet_period_s=quiet_period_s, only={run})
    if found.entries:
        return found.entries[0]
    raise ValueError(f"no run {run!r} under the archive {archive_root}")


def entry_root(entry, archive_root: str | Path) -> Path:
    """The folder to analyse `entry` from: the archive root when the entry is in it, else its own folder."""
    return Path(archive_root) if Path(archive_root, Path(entry.path).name).exists() else Path(entry.path).parent
