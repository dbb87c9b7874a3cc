"""Ingest of every verl line format: number formats, prefixes, CR, wrapping, JSONL, seed formats, resumes."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.ingest import IngestLimits, linescan
from tests.test_ingest_helpers import ingest_root, ingest_text, same, values


@pytest.fixture(autouse=True, params=["hyperscan", "arrow"])
def line_classifier(request, monkeypatch):
    """Every format read twice: lines classified in one Hyperscan pass, and with Arrow's kernels alone."""
    if request.param == "arrow":
        monkeypatch.setattr(linescan, "hyperscan", None)
    return request.param

NP2 = (
    "(TaskRunner pid=3165) step:71 - global_seqlen/min:69484 - actor/entropy:0.1194450631737709 - "
    "critic/vf_loss:np.float64(0.007003280876688223) - actor/lr:np.float64(1e-06) - "
    "timing_s/agent_loop/slowest/num_preempted:np.int64(-1) - actor/pg_loss:np.float64(nan) - "
    "actor/grad_norm:inf - critic/x:-inf - response/aborted:True - timing_s/gen:4.229507855139673\n"
)
BARE = "(TaskRunner pid=247607) step:1 - actor/pg_loss:-0.0036091046008680547 - actor/lr:1e-06 - training/epoch:0\n"
V04 = "step:1 - global_seqlen/min:484245.000 - actor/ppo_kl:-0.000 - training/global_step:1.000 - x:nan\n"


def test_three_number_formats(tmp_path):
    run = ingest_text(tmp_path, NP2 + BARE + V04)
    v = values(run)
    assert v[(71, "critic/vf_loss")] == 0.007003280876688223
    assert v[(71, "actor/lr")] == 1e-06
    assert v[(71, "timing_s/agent_loop/slowest/num_preempted")] == -1
    assert math.isnan(v[(71, "actor/pg_loss")])
    assert v[(71, "actor/grad_norm")] == math.inf and v[(71, "critic/x")] == -math.inf
    assert v[(71, "response/aborted")] == 1.0
    assert v[(1, "actor/pg_loss")] == -0.0036091046008680547
    assert v[(1, "global_seqlen/min")] == 484245.0 and v[(1, "training/global_step")] == 1.0
    assert math.isnan(v[(1, "x")])
    assert run.run["n_parse_failures"] == 0
    assert run.run["verl_format"] == "np2"
    assert {m["source"] for m in run.metrics} == {"console"}
    assert [ln["kind"] for ln in run.lines] == ["step_metrics"] * 3


def test_v04_format_detected(tmp_path):
    run = ingest_text(tmp_path, V04.replace(" - x:nan", "") * 2)
    assert run.run["verl_format"] == "v04"


def test_ray_prefixes_ansi_and_repeated_suffix(tmp_path):
    text = (
        "\x1b[36m(main_task pid=12)\x1b[0m step:1 - a:1.5 - b:2\n"
        "\x1b[36m(WorkerDict pid=169054, ip=10.1.2.3)\x1b[0m step:2 - a:2.5 [repeated 2x across cluster] "
        "(Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication)\n"
        "(pid=77) hello\n"
        "\x1b[33m(raylet)\x1b[0m [2025-12-07 09:57:19,206 E 393463 393463] (raylet) node_manager.cc:3277: "
        "2 Workers (tasks / actors) killed due to memory pressure (OOM)\n"
    )
    run = ingest_text(tmp_path, text)
    v = values(run)
    assert v == {(1, "a"): 1.5, (1, "b"): 2.0, (2, "a"): 2.5}
    assert [ln["component"] for ln in run.lines] == ["main_task", "WorkerDict", "pid", "raylet"]
    assert [ln["pid"] for ln in run.lines] == [12, 169054, 77, None]
    assert not any("\x1b" in ln["text"] for ln in run.lines)
    assert run.lines[3]["kind"] == "error"
    assert str(run.lines[3]["ts"]) == "2025-12-07 09:57:19.206000"


def test_step_line_after_carriage_return_and_crlf(tmp_path):
    text = "Training Progress:  16%|##  | 1/6 [00:10<00:50, 10.0s/it]\rstep:1 - a:1 - b:2\r\nnext line\r\n"
    run = ingest_text(tmp_path, text.encode())
    assert values(run) == {(1, "a"): 1.0, (1, "b"): 2.0}
    assert [ln["text"] for ln in run.lines][1] == "next line"
    assert "\r" in run.lines[0]["text"]
    assert any("CRLF" in p for p in run.run["problems"])


def test_partial_pairs_kept_and_failures_counted(tmp_path):
    run = ingest_text(tmp_path, "step:3 - a:1 - b:oops - c:np.float64(2.5) - nocolon - d:\n")
    assert values(run) == {(3, "a"): 1.0, (3, "c"): 2.5}
    assert run.run["n_parse_failures"] == 3
    assert run.result.n_parse_failures == 3


def test_hard_wrapped_step_line_reassembled(tmp_path):
    full = "(TaskRunner pid=1) step:7 - " + " - ".join(f"metric/key_{i}:{i}.{i}{i}{i}" for i in range(40))
    width = 100
    pieces = [full[i : i + width] for i in range(0, len(full), width)]
    run = ingest_text(tmp_path, "\n".join(pieces) + "\n(TaskRunner pid=1) after\n")
    v = values(run)
    assert len(v) == 40
    assert v[(7, "metric/key_39")] == float("39.393939")
    assert len(run.lines) == len(pieces) + 1
    assert {ln["kind"] for ln in run.lines[: len(pieces)]} == {"step_metrics"}


# metric rows reconciled in memory (Arrow), or all spilled to a scratch file (DuckDB): the same rows
IN_MEMORY = pytest.mark.parametrize("metric_rows_in_memory", [2**20, 0], ids=["in-memory", "spilled"])


@IN_MEMORY
def test_jsonl_logger_null_is_nan_and_console_wins(tmp_path, metric_rows_in_memory):
    root = tmp_path / "archive" / "run-j"
    (root / "logs").mkdir(parents=True)
    (root / "train.log").write_text("step:1 - a:1.0 - b:2.0\nstep:2 - a:3.0\n")
    rows = [
        {"step": 1, "data": {"a": 9.0, "b": None, "c": 5}},
        {"step": 2, "data": {"a": 8.0, "d": None}},
        {"step": 3, "data": {"a": 7.0}},
    ]
    (root / "logs" / "exp.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step":4,"da')
    limits = IngestLimits(metric_rows_in_memory=metric_rows_in_memory)
    run = ingest_root(tmp_path / "archive", tmp_path / "wh", limits)["run-j"]
    got = {(m["step"], m["key"]): (m["value"], m["source"]) for m in run.metrics}
    assert got[(1, "a")] == (1.0, "console")
    assert got[(1, "b")] == (2.0, "console")
    assert got[(1, "c")] == (5.0, "jsonl")
    assert math.isnan(got[(2, "d")][0]) and got[(2, "d")][1] == "jsonl"
    assert got[(3, "a")] == (7.0, "jsonl")
    assert run.run["n_parse_failures"] == 1
    assert len(run.lines) == 6
    assert {ln["file"] for ln in run.lines} == {"train.log", "logs/exp.jsonl"}


def test_seed_article_formats(tmp_path):
    text = (
        "[2025-04-05 10:32:15] [INFO] [actor_worker_0] step=1200, episode_reward=8.76, kl_div=0.12, response_len=128\n"
        "[INFO] step: gen: 2487.3ms\n"
        "[INFO] step: update_actor: 500ms\n"
    )
    run = ingest_text(tmp_path, text)
    got = {(m["step"], m["key"]): (m["value"], m["source"]) for m in run.metrics}
    assert got[(1200, "episode_reward")] == (8.76, "seed_kv")
    assert got[(1200, "response_len")] == (128.0, "seed_kv")
    assert got[(1201, "timing_s/gen")] == (pytest.approx(2.4873), "seed_timing")
    assert got[(1201, "timing_s/update_actor")] == (0.5, "seed_timing")
    assert run.run["verl_format"] == "seed_kv"
    assert str(run.lines[0]["ts"]) == "2025-04-05 10:32:15"


CONFIG = """(TaskRunner pid=5) {'actor_rollout_ref': {'actor': {'strategy': 'fsdp', 'optim': {'lr': 1e-06}},
(TaskRunner pid=5)                        'rollout': {'n': 8, 'name': 'vllm'}},
(TaskRunner pid=5)  'trainer': {'project_name': 'p', 'experiment_name': 'e%s'}}
(TaskRunner pid=5) Total training steps: %d
"""


@IN_MEMORY
def test_resume_segments_later_segment_wins(tmp_path, metric_rows_in_memory):
    text = (
        CONFIG % ("1", 10)
        + "step:0 - val:0.1\nstep:1 - a:1.0 - b:1.0\nstep:2 - a:2.0\n(WorkerDict pid=9) working\n"
        + CONFIG % ("2", 20)
        + "step:1 - val:0.2\nstep:2 - a:20.0\nstep:3 - a:3.0\n"
    )
    run = ingest_text(tmp_path, text, limits=IngestLimits(metric_rows_in_memory=metric_rows_in_memory))
    got = {(m["step"], m["key"]): (m["value"], m["segment"]) for m in run.metrics}
    # one row per (step, key), ordered by step then key
    assert [(m["step"], m["key"]) for m in run.metrics] == [
        (0, "val"), (1, "a"), (1, "b"), (1, "val"), (2, "a"), (3, "a")
    ]
    assert not [p.name for p in (tmp_path / "wh").iterdir() if p.name.startswith(".ingest-")]
    assert got[(2, "a")] == (20.0, 1)
    assert got[(1, "a")] == (1.0, 0)
    assert got[(1, "val")] == (0.2, 1)
    assert got[(3, "a")] == (3.0, 1)
    assert run.run["n_segments"] == 2
    assert run.run["experiment_name"] == "e2" and run.run["total_training_steps"] == 20
    assert len(run.lines) == text.count("\n")
    by_text = {ln["text"]: ln for ln in run.lines}
    assert by_text["(WorkerDict pid=9) working"]["step"] == 3
    assert by_text["(WorkerDict pid=9) working"]["segment"] == 0
    assert by_text["step:2 - a:2.0"]["step"] == 2
    assert by_text["step:3 - a:3.0"]["segment"] == 1
    assert {ln["kind"] for ln in run.lines if ln["text"].startswith("(TaskRunner pid=5) ")} == {"config"}


def test_step_in_progress_and_phase_hints(tmp_path):
    text = (
        "before\n"
        "step:4 - a:1\n"
        "(WorkerDict pid=2) DEBUG:2025-06-28 18:06:41,828:dp actor Before update_policy, memory allocated (GB): "
        "1.84, memory reserved (GB): 3.68, device memory used/total (GB): 4.11/23.59\n"
        "(WorkerDict pid=2) After update_policy, memory allocated (GB): 2.5, memory reserved (GB): 3.0\n"
        "ray::WorkerDict.actor_rollout_generate_sequences() (pid=1)\n"
        "ray::WorkerDict.actor_rollout_compute_log_prob()\n"
        "ray::WorkerDict.ref_compute_ref_log_prob()\n"
        "WARNING:2025-11-28 16:00:45,396:Async request timed out\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 3, in f\n'
        "    raise ValueError('x')\n"
        "ValueError: x\n"
    )
    run = ingest_text(tmp_path, text)
    lines = run.lines
    assert [ln["step"] for ln in lines[:3]] == [0, 4, 5]
    assert [ln["kind"] for ln in lines] == [
        "other",
        "step_metrics",
        "memory",
        "memory",
        "other",
        "other",
        "other",
        "warning",
        "error",
        "error",
        "error",
        "error",
    ]
    assert [ln["phase_hint"] for ln in lines[2:7]] == [
        "update_actor",
        "update_actor",
        "gen",
        "old_log_prob",
        "ref",
    ]
    v = values(run)
    assert v[(5, "memory/allocated_gb_max")] == 2.5
    assert v[(5, "memory/reserved_gb_max")] == 3.68
    assert v[(5, "memory/device_used_gb_max")] == 4.11
    assert v[(5, "memory/device_total_gb")] == 23.59


def test_reingest_gives_identical_content(tmp_path):
    text = CONFIG % ("1", 10) + NP2 + BARE + "noise\n" * 50
    first = ingest_text(tmp_path, text)
    second = ingest_root(tmp_path / "archive", tmp_path / "wh")[first.entry.run_id]
    assert first.lines == second.lines
    assert len(first.metrics) == len(second.metrics)
    assert all(
        same(a["value"], b["value"]) and a["key"] == b["key"]
        for a, b in zip(first.metrics, second.metrics, strict=True)
    )
    drop = {"ingested_at"}
    assert {k: v for k, v in first.run.items() if k not in drop} == {
        k: v for k, v in second.run.items() if k not in drop
    }


def test_zip_and_gzipped_logs_inside_a_folder_read_like_the_plain_folder(tmp_path):
    """The same simulated run as a plain folder, a .zip of it, and a folder holding train.log.gz."""
    import gzip
    import shutil
    import zipfile

    from lab.simulate import simulate_fleet

    labels = simulate_fleet(tmp_path / "sim", runs=12, seed=31)
    run_id, lab = next((r, lab) for r, lab in sorted(labels["runs"].items()) if lab["archive_form"] == "dir")
    plain = tmp_path / "sim" / "archive" / lab["entry"]
    root = tmp_path / "archive"
    shutil.copytree(plain, root / "plain")
    with zipfile.ZipFile(root / "zipped.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(plain.rglob("*")):
            if path.is_file():
                zf.write(path, f"zipped/{path.relative_to(plain).as_posix()}")
    shutil.copytree(plain, root / "gzipped")
    log = root / "gzipped" / "train.log"
    (root / "gzipped" / "train.log.gz").write_bytes(gzip.compress(log.read_bytes()))
    log.unlink()
    runs = ingest_root(root, tmp_path / "wh")
    assert {runs["zipped"].run["archive_form"], runs["gzipped"].run["archive_form"]} == {"zip", "dir"}

    def by_file(run):
        return {(m["file"].removesuffix(".gz"), m["step"], m["key"]): m["value"] for m in run.metrics}

    want = by_file(runs["plain"])
    # memory lines count toward the step in progress, which a run that died never finished
    assert max(m["step"] for m in runs["plain"].metrics if m["source"] != "memory_line") == lab["last_step"]
    for name in ("zipped", "gzipped"):
        got = by_file(runs[name])
        assert got.keys() == want.keys() and all(same(got[k], want[k]) for k in want), name
        assert len(runs[name].lines) == len(runs["plain"].lines), name


def _memory_line(allocated: str, reserved: str = "1.00") -> str:
    return (
        f"(WorkerDict pid=2) DEBUG:2025-06-28 18:06:41,828:Before update_policy, memory allocated (GB): "
        f"{allocated}, memory reserved (GB): {reserved}\n"
    )


@pytest.mark.parametrize("block_bytes", [2**20, 300])
def test_memory_maximum_per_step_across_blocks_and_segments(tmp_path, block_bytes):
    """The largest value per step and key, whatever the blocks; its earliest line on ties; after a resume
    the later segment's value of a repeated step wins."""
    text = (
        "step:1 - a:1\n"
        + _memory_line("2.00")  # line 2: step 2 in progress
        + _memory_line("7.50")  # line 3: the maximum...
        + _memory_line("3.00")
        + _memory_line("7.50")  # line 5: ...tied, later
        + "step:2 - a:2\n"
        + _memory_line("9.00", reserved="4.00")  # step 3, segment 0
        + "step:1 - a:1\n"  # a resume repeats steps 1 and 2: segment 1
        + "step:2 - a:2\n"
        + _memory_line("1.25")  # step 3, segment 1: wins over 9.00
    )
    run = ingest_text(tmp_path, text, limits=IngestLimits(block_bytes=block_bytes))
    mem = {(m["step"], m["key"]): m for m in run.metrics if m["source"] == "memory_line"}
    assert {k: m["value"] for k, m in mem.items()} == {
        (2, "memory/allocated_gb_max"): 7.5,
        (2, "memory/reserved_gb_max"): 1.0,
        (3, "memory/allocated_gb_max"): 1.25,
        (3, "memory/reserved_gb_max"): 1.0,
    }
    assert mem[(2, "memory/allocated_gb_max")]["line_no"] == 3
    assert mem[(2, "memory/reserved_gb_max")]["line_no"] == 2
    assert mem[(3, "memory/allocated_gb_max")]["segment"] == 1
    assert mem[(3, "memory/allocated_gb_max")]["line_no"] == 10


def test_year_less_clocks_take_the_year_of_the_logs_dated_stamps(tmp_path):
    """vLLM's `WARNING 03-10 22:48:08` and glog's `E0718 23:11:36.409826` carry no year: each line gets the year
    of the dated stamp before it (the nearer year across a new year); before any dated stamp, no time."""
    text = (
        "INFO 12-31 23:50:00 [config.py:1] before any dated stamp\n"
        "2025-12-31 23:58:00,100\tINFO worker.py:1843 -- Started a local Ray instance.\n"
        "\x1b[36m(WorkerDict pid=19740)\x1b[0m WARNING 12-31 23:59:08 config.py:1005] Chunked prefill is enabled\n"
        "(pid=) E0101 00:11:36.409826 1081186 slow_operation_alarm.cc:140] The operation took 3m49s\n"
        "I0101 is no clock\n"
    )
    run = ingest_text(tmp_path, text)
    assert [None if ln["ts"] is None else str(ln["ts"]) for ln in run.lines] == [
        None, "2025-12-31 23:58:00.100000", "2025-12-31 23:59:08", "2026-01-01 00:11:36", None]
    assert str(run.run["last_ts"]) == "2026-01-01 00:11:36"


def test_lines_cut_at_4096_characters_are_reported(tmp_path):
    """W&B's output.log cuts console lines at 4096 characters: a step line of exactly that length lost its
    end, and the run's problems say how many such lines a file has; a shorter line is not counted."""
    cut = ("step:3 - " + " - ".join(f"val-aux/score/m{i}:0.5" for i in range(400)))[:4096]
    assert len(cut) == 4096
    run = ingest_text(tmp_path, cut + "\nstep:4 - a:1\n" + "x" * 4095 + "\n")
    found = [p for p in run.run["problems"] if "4096 characters" in p]
    assert found == ["run-a.log: 1 line(s) exactly 4096 characters long: W&B's console capture (output.log) cuts "
                     "lines there, so their ends, the last metrics of a step line, are missing"]
