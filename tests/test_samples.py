"""run_samples: the sampled generations verl prints, checked against the log text itself."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from pipeline import derive
from pipeline.lake import connect
from pipeline.report import render_run_report

REAL = Path(__file__).resolve().parents[2] / "shared" / "real-logs"
LOG_08 = "08_eto_megatron_grpo_qwen7b_math_two_runs_second_ctrl_c_step11.log"
LOG_20 = "20_eto_fsdp_qwen7b_raytaskerror_actordied_step1.log"

R = "(TaskRunner pid=100) "
W = "(WorkerDict pid=200) "
REPEATED = "I repeat this line again and again."
# Hand-written: eight printouts around three step lines; what each should show is worked out by hand below.
SMALL_LOG = "\n".join([
    R + "Training from scratch",
    # step 1: a response that repeats a line (a worker's line interleaved in it), and an empty one
    R + "[prompt] user", R + "What is 6*7?",
    R + "[response] The answer is the answer is the answer.",
    R + REPEATED, W + "WARNING worker noise inside the printout", R + REPEATED, R + REPEATED, R + REPEATED,
    R + "<|im_end|>",
    R + "[ground_truth] 42", R + "[score] 0.0",
    R + "[prompt] user", R + "What is 6*7?", R + "[response] <|im_end|>", R + "[ground_truth] 42", R + "[score] 0.0",
    R + "step:1 - critic/score/mean:0.000 - actor/entropy:1.000",
    # step 2: rewarded without the answer, and the answer without reward
    R + "[prompt] user", R + "What is 6*7?", R + "[response] I am not sure.<|im_end|>",
    R + "[ground_truth] 42", R + "[score] 1.0",
    R + "[prompt] user", R + "What is 6*7?", R + "[response] 6*7 = 42", R + "#### 42<|im_end|>",
    R + "[ground_truth] 42", R + "[score] 0.0",
    R + "step:2 - critic/score/mean:0.500 - actor/entropy:0.900",
    # step 3: a clean best, an unremarkable middle one, and one cut off (no end marker)
    R + "[prompt] user", R + "What is 3+4?", R + "[response] 3+4 = 7", R + "#### 7<|im_end|>",
    R + "[ground_truth] 7", R + "[score] 1.0",
    R + "[prompt] user", R + "What is 3+4?", R + "[response] It is seven, #### 7<|im_end|>",
    R + "[ground_truth] 7", R + "[score] 0.5",
    R + "[prompt] user", R + "What is 3+4?", R + "[response] Let me think step by step and",
    R + "[ground_truth] 7", R + "[score] 0.0",
    # countdown prints its ground truth as a dict: no answer to look for, so no cue
    R + "[prompt] user", R + "Make 98 from 44, 19, 35.", R + "[response] <answer>44 + 19 + 35</answer><|im_end|>",
    R + "[ground_truth] {'target': 98, 'numbers': [44, 19, 35]}", R + "[score] 1.0",
    R + "step:3 - critic/score/mean:0.500 - actor/entropy:0.800",
    # the log ends mid-print: a prompt with no response is no sample
    R + "[prompt] user", R + "What is 1+1?",
]) + "\n"
# The same printouts from a driver run without Ray: no prefix on any line (the worker's line left out, since
# without a pid it would be the driver's own)
PLAIN_LOG = "".join(line[len(R):] + "\n" for line in SMALL_LOG.splitlines() if line.startswith(R))
SMALL_LOG_PICKS = [
    (1, 0.0, ["repetition"], ["best", "cue"]),
    (1, 0.0, ["empty_answer"], ["worst", "cue"]),
    (2, 1.0, ["reward_without_answer"], ["best", "cue"]),
    (2, 0.0, ["answer_without_reward"], ["worst", "cue"]),
    (3, 1.0, [], ["best"]),
    (3, 0.0, ["cut_at_max_length"], ["worst", "cue"]),
]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """The two real logs and the hand-written one, ingested, with run_samples derived."""
    from pipeline.ingest import discover_runs, ingest_run

    root = tmp_path_factory.mktemp("samples")
    archive = root / "archive"
    archive.mkdir()
    for name in (LOG_08, LOG_20):
        shutil.copy2(REAL / name, archive / name)
    (archive / "small_samples.log").write_text(SMALL_LOG)
    (archive / "plain_samples.log").write_text(PLAIN_LOG)
    wh = root / "warehouse"
    found = discover_runs(archive, quiet_period_s=0, now=time.time() + 10**7)
    for entry in found.entries:
        ingest_run(entry, wh)
    derive.derive_run_tables(wh, [e.run_id for e in found.entries])
    return wh


def _rows(wh: Path, run_id_like: str) -> list[dict]:
    con = connect(wh)
    try:
        cur = con.execute("select * from run_samples where run_id like $r order by sample_no", {"r": run_id_like})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def test_hand_written_log_samples_and_cues(warehouse):
    rows = _rows(warehouse, "small_samples%")
    got = [(r["step"], r["score"], list(r["cues"]), list(r["picked_for"])) for r in rows]
    assert got == SMALL_LOG_PICKS
    # eight complete printouts; step 3's unremarkable 0.5 and countdown's second 1.0 are not kept, the
    # cut-off prompt is none
    assert {r["run_samples"] for r in rows} == {8}
    first = rows[0]
    assert first["response"] == "\n".join(["The answer is the answer is the answer.", *[REPEATED] * 4, "<|im_end|>"])
    assert first["prompt"] == "user\nWhat is 6*7?" and first["ground_truth"] == "42"
    assert first["response_chars"] == len(first["response"])
    assert rows[3]["response"] == "6*7 = 42\n#### 42<|im_end|>"


def test_samples_printed_without_a_ray_prefix(warehouse):
    """A tag opening the line is a field as much as one after the Ray prefix."""
    rows = _rows(warehouse, "plain_samples%")
    assert [(r["step"], r["score"], list(r["cues"]), list(r["picked_for"])) for r in rows] == SMALL_LOG_PICKS
    assert {r["run_samples"] for r in rows} == {8}
    assert rows[0]["response"] == "\n".join(["The answer is the answer is the answer.", *[REPEATED] * 4, "<|im_end|>"])


def test_real_log_sample_read_from_its_text(warehouse):
    """Log 20 prints one validation sample before its step:0 line: a right answer scored 0.0."""
    text = (REAL / LOG_20).read_text(errors="replace")
    response = re.search(r"\[response\] (.*)", text).group(1)
    (row,) = _rows(warehouse, "20_%")
    assert row["response"] == response.strip()
    assert row["step"] == 0 and row["score"] == 0.0 and row["ground_truth"] == "18"
    assert list(row["cues"]) == ["answer_without_reward"]  # "The final answer is $18." without "####"


def test_real_log_with_interleaved_lines(warehouse):
    """Log 08 prints 68 samples; progress bars and other processes' lines cut into its responses."""
    text = (REAL / LOG_08).read_text(errors="replace")
    printed = text.count("[prompt] ")
    rows = _rows(warehouse, "08_%")
    assert {r["run_samples"] for r in rows} == {printed} and printed == 68
    first = rows[0]
    assert first["step"] == 0 and first["score"] == 1.0 and first["ground_truth"] == "18"
    assert first["response"].startswith("Let's break down the problem step by step:")
    assert first["response"].endswith("#### 18")
    assert "Training Progress" not in first["response"] and "warnings.warn" not in first["response"]
    # every sample's step is that of the first step line printed after it
    steps = [int(m.group(1)) for m in re.finditer(r"step:(\d+) - ", text)]
    assert {r["step"] for r in rows} <= set(steps)
    assert not any("wandb:" in r["response"] for r in rows)


def _page(wh: Path, run_id: str, out: Path):
    from report_fixtures import parse_html

    return parse_html(render_run_report(wh, run_id, out).read_text())


def test_run_report_shows_the_samples(warehouse, tmp_path):
    doc = _page(warehouse, "small_samples", tmp_path)
    shown = doc.find_all("details", cls="sample")
    assert [(d.attrs["data-step"], d.attrs.get("data-cues")) for d in shown] == [
        ("1", "repeats itself"), ("1", "empty answer"), ("2", "rewarded without the reference answer"),
        ("2", "reference answer given, no reward"), ("3", None), ("3", "cut at the length limit")]
    assert any("6 of the 8 sampled generations the log printed" in p.text() for p in doc.find_all("p", cls="note"))
    assert shown[3].find("pre", cls="response").text() == "6*7 = 42\n#### 42<|im_end|>"
    real = _page(warehouse, "20_eto_fsdp_qwen7b_raytaskerror_actordied_step1", tmp_path)
    text = (REAL / LOG_20).read_text(errors="replace")
    response = re.search(r"\[response\] (.*)", text).group(1).strip()
    (sample,) = real.find_all("details", cls="sample")
    assert sample.find("pre", cls="response").text() == response
    assert "score 0" in sample.find("summary").text()


def test_a_run_without_printouts_has_no_samples_section(warehouse, tmp_path):
    wh = tmp_path / "wh"
    from pipeline.ingest import discover_runs, ingest_run

    archive = tmp_path / "a"
    archive.mkdir()
    (archive / "quiet.log").write_text(R + "step:1 - critic/score/mean:0.1\n" + R + "step:2 - critic/score/mean:0.2\n")
    for entry in discover_runs(archive, quiet_period_s=0, now=time.time() + 10**7).entries:
        ingest_run(entry, wh)
    derive.derive_run_tables(wh, ["quiet"])
    doc = _page(wh, "quiet", tmp_path / "r")
    assert not doc.find_all("details", cls="sample") and not doc.find_all("h2", id_="samples")


def test_samples_around_an_anomaly_episode_come_first(warehouse, monkeypatch):
    """With room for two, the report keeps the two samples within two steps of the episode (steps 5-6)."""
    from types import SimpleNamespace

    from pipeline.report import samples

    episode = SimpleNamespace(first_step=5, last_step=6, anomaly_class="kl_spike")
    con = connect(warehouse)
    try:
        every = samples.load_samples(con, {"small_samples": [episode]})["small_samples"]
        monkeypatch.setattr(samples, "MAX_SHOWN", 2)
        two = samples.load_samples(con, {"small_samples": [episode]})["small_samples"]
    finally:
        con.close()
    assert [(s.step, s.episode) for s in every.shown] == [
        (1, None), (1, None), (2, None), (2, None), (3, "kl_spike"), (3, "kl_spike")]
    assert [(s.step, s.score) for s in two.shown] == [(3, 1.0), (3, 0.0)] and two.printed == 8


def test_a_response_with_markup_is_shown_as_text(tmp_path):
    from pipeline.ingest import discover_runs, ingest_run

    hostile = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"
    archive = tmp_path / "a"
    archive.mkdir()
    (archive / "hostile_sample.log").write_text("\n".join([
        R + "[prompt] user", R + "Say hi", R + "[response] " + hostile, R + "[ground_truth] hi", R + "[score] 1.0",
        R + "step:1 - critic/score/mean:1.000"]) + "\n")
    for entry in discover_runs(archive, quiet_period_s=0, now=time.time() + 10**7).entries:
        ingest_run(entry, tmp_path / "wh")
    derive.derive_run_tables(tmp_path / "wh", ["hostile_sample"])
    doc = _page(tmp_path / "wh", "hostile_sample", tmp_path / "r")
    (sample,) = doc.find_all("details", cls="sample")
    assert sample.find("pre", cls="response").text() == hostile
    assert not sample.find_all("script") and not sample.find_all("img")
