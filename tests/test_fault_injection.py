"""An operator's worst night in one batch: two good runs beside bad ones (truncated gzip, tar-slip tar, corrupt tar,
garbage bytes, an empty run, CRLF + latin-1, one 50 MB line, a 2 GB gzip bomb, a key given twice on a step line,
5 M lines) in one `verl-health analyze`. It exits 0; the good runs are fully analysed, as their labels say; the
readable bad runs are kept with their problems shown; nothing is written outside the folder the test works in."""

from __future__ import annotations

import json

import duckdb
import pytest
from markupsafe import escape

from pipeline import tables
from tests import fault_archive
from tests.conftest import SHARED

LABELS = SHARED / "real-logs" / "LABELS.jsonl"


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    if not LABELS.is_file():
        pytest.skip("../shared/real-logs is missing")
    from pipeline.cli import main

    root = tmp_path_factory.mktemp("night")
    work = root / "work"
    kinds = fault_archive.build(work / "archive", SHARED / "real-logs")
    before = {p for p in root.rglob("*")}
    rc = main(["analyze", str(work / "archive"), "--warehouse", str(work / "wh"), "--reports", str(work / "rep"),
               "--no-record"])
    written = {p for p in root.rglob("*")} - before
    return rc, root, work, kinds, written


def _query(work, sql: str, params: dict | None = None):
    con = duckdb.connect(str(work / "wh" / "warehouse.duckdb"), read_only=True)
    try:
        return con.execute(sql, params or {}).fetchall()
    finally:
        con.close()


def test_the_batch_exits_0_and_writes_only_in_its_folder(night):
    rc, root, work, _, written = night
    assert rc == 0
    assert all(work in p.parents for p in written), sorted(p for p in written if work not in p.parents)
    assert not list(root.parent.rglob(fault_archive.SLIP_TARGET.rsplit("/", 1)[-1]))


def test_the_good_runs_are_fully_analysed_as_their_labels_say(night):
    _, _, work, kinds, _ = night
    labels = {json.loads(line)["file"].removesuffix(".log"): json.loads(line)
              for line in LABELS.read_text().splitlines() if line.strip()}
    for run_id in kinds["good"]:
        for table in tables.per_run_tables():
            assert (work / "wh" / table / f"run_id={run_id}").is_dir(), (run_id, table)
        row = _query(work, "select failure_class, last_step, analysis_error from run_summary where run_id = $r",
                     {"r": run_id})
        assert row == [(labels[run_id]["failure_class"], labels[run_id]["last_step"], None)]
        assert (work / "rep" / "runs" / f"{run_id}.html").is_file()
    fleet = (work / "rep" / "fleet" / "latest.html").read_text()
    assert all(run_id in fleet for run_id in kinds["good"])


def test_the_readable_bad_runs_are_kept_with_their_problems(night):
    _, _, work, kinds, _ = night
    for run_id in kinds["readable"] + kinds["unreadable"]:
        report = (work / "rep" / "runs" / f"{run_id}.html").read_text()
        (problems,) = _query(work, "select problems from runs where run_id = $r", {"r": run_id})[0]
        assert all(str(escape(p)) in report for p in problems), run_id
    assert _query(work, "select count(*) from log_lines where run_id = 'many-lines'") == [(fault_archive.MANY_LINES,)]
    assert _query(work, "select value from step_metrics where run_id = 'dupkey' and step = 1 "
                        "and key = 'actor/entropy'") == [(0.6,)]
    assert _query(work, "select count(*) from run_summary where analysis_error is not null") == [(0,)]


def test_no_table_carries_a_multi_megabyte_text(night):
    _, _, work, _, _ = night
    (longest,) = _query(work, "select max(strlen(text)) from log_lines")[0]
    assert longest <= 2**20
    for column in ("root_cause_text", "last_line_text"):
        assert _query(work, f"select coalesce(max(strlen({column})), 0) <= 1048576 from run_summary") == [(True,)]
