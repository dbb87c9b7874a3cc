"""The Dagster instance the command line records its runs in."""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterInstance

from pipeline.defs.storage import skip_flush_under


def record_home(warehouse: str | Path) -> Path:
    """Where the command line's Dagster record lives: $DAGSTER_HOME, else `dagster/` beside the warehouse folder."""
    return Path(os.environ.get("DAGSTER_HOME") or Path(warehouse).resolve().parent / "dagster")


def persistent_instance(warehouse: str | Path) -> DagsterInstance:
    """The Dagster instance the command line records its runs in, so `make ui` shows them: $DAGSTER_HOME,
    else `dagster/` beside the warehouse folder (data/dagster for data/warehouse). Without a dagster.yaml
    there, Dagster's default SQLite storage writes its files under that folder without a disk flush per
    commit (pipeline.defs.storage); a dagster.yaml is the operator's and is kept as it says."""
    home = str(record_home(warehouse))
    Path(home).mkdir(parents=True, exist_ok=True)
    if not Path(home, "dagster.yaml").exists():
        skip_flush_under(home)
    return DagsterInstance.from_config(home)
