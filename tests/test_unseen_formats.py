"""The diagnosis of logs written the way other real verl runs print them (tests/test_unseen_formats_cases.py):
other verl versions and number formats, Ray prefixes with and without ANSI colours and IPs, Python
logging, glog, vLLM, SGLang and container timestamps, FSDP and Megatron workers, vLLM and SGLang
engines, failures in every phase, schedulers' stops, logs cut short and runs with only a progress bar.

Each log goes through the real ingest and derive; the expected class, last step, phase, stop reason
and causal line are what the formats reference and DESIGN.md say, written beside each log.
"""

from __future__ import annotations

import time

import pytest

from pipeline import derive
from pipeline.ingest import discover_runs, ingest_run
from pipeline.lake import connect
from tests.test_unseen_formats_cases import CASES, Case


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict[str, dict]:
    """run_summary of every case, each written as one log file of its own run."""
    root = tmp_path_factory.mktemp("unseen")
    archive = root / "archive"
    archive.mkdir()
    for case in CASES:
        (archive / f"{case.name}.log").write_text(case.text)
    found = discover_runs(archive, quiet_period_s=0, now=time.time() + 1)
    for entry in found.entries:
        ingest_run(entry, root / "wh")
    derive.derive_run_tables(root / "wh", [e.run_id for e in found.entries])
    cur = connect(root / "wh").execute("select * from run_summary")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    return {row["run_id"]: row for row in rows}


def test_every_case_is_a_run_of_its_own(summary: dict[str, dict]) -> None:
    """The cases have distinct names and each became one run."""
    assert len({c.name for c in CASES}) == len(CASES)
    assert set(summary) == {c.name for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_outcome(case: Case, summary: dict[str, dict]) -> None:
    """Class, last step, phase, stop reason and causal line as a reader of the log gives them."""
    got = summary[case.name]
    assert (got["failure_class"], got["last_step"], got["failure_phase"], got["stop_reason"]) == (
        case.failure_class, case.last_step, case.phase, case.stop_reason)
    if case.root:
        assert case.root.lower() in (got["root_cause_text"] or "").lower()
    assert (got["hang_reason"] is not None) == (case.failure_class == "hang")
