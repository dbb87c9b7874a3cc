"""A log much bigger than derive's memory cap is derived whole: DuckDB spills or streams, no table holds every
line's text in memory (run_summary's last line did, and ran out of memory on a 300 MB real log)."""

from __future__ import annotations

import random

import duckdb
import pytest

from tests.conftest import SHARED

LOG = "16_opd_qwen_1_5b_normal_12steps_wandb_output"


def test_a_log_bigger_than_the_memory_cap_gets_every_table(tmp_path, monkeypatch):
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared/real-logs is missing")
    from pipeline import derive
    from pipeline.defs.analysis import analyze_archive

    # a real run with 120,000 rollout printouts (22 MB) in its middle, derived under a 40 MB cap
    lines = (SHARED / "real-logs" / f"{LOG}.log").read_text().splitlines()
    rng = random.Random(1)
    filler = [f"(WorkerDict pid={1000 + i % 7}) rollout sample {i}: " + "".join(rng.choices("abcdefghij ", k=150))
              for i in range(120_000)]
    text = lines[: len(lines) // 2] + filler + lines[len(lines) // 2:]
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "big-run.log").write_text("\n".join(text) + "\n")
    monkeypatch.setattr(derive, "DERIVE_MEMORY_LIMIT", "40MB")

    outcome = analyze_archive(archive, tmp_path / "warehouse", tmp_path / "reports")
    assert outcome.not_analysed == {}
    last = max(i for i, line in enumerate(text, 1) if line.strip())
    row = duckdb.execute(
        "select last_line_no, last_line_text, analysis_error from read_parquet($p)",
        {"p": str(tmp_path / "warehouse" / "run_summary" / "run_id=big-run" / "part-0.parquet")}).fetchone()
    assert row == (last, text[last - 1], None)
