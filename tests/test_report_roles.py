"""The run report names the role of the file its root cause is in (tests/test_roles.py builds the folder)."""

from __future__ import annotations

import re

from pipeline import derive
from pipeline.report.render import render_run_report
from tests.test_ingest_helpers import ingest_root
from tests.test_roles import DRIVER_DEATH, DRIVER_STEPS, WORKER, WORKER_OOM, _run_folder


def test_a_root_cause_in_a_ray_worker_file_is_shown_with_that_role(tmp_path):
    """The OOM only the worker's .err prints is the root cause: its location is the worker file, line 6 of
    WORKER_OOM, labelled as a Ray worker's log."""
    ingest_root(_run_folder(tmp_path / "a", DRIVER_STEPS + DRIVER_DEATH, WORKER_OOM), tmp_path / "wh")
    derive.derive_run_tables(tmp_path / "wh", ["run-r"])
    html = render_run_report(tmp_path / "wh", "run-r", tmp_path / "reports").read_text()
    assert f'id="root-cause-location">{WORKER}:6</span>' in html
    role = re.search(r'id="root-cause-location-role" data-role="(\w+)">([^<]*)<', html)
    assert role.groups() == ("ray_worker", "Ray worker log")
