"""The fleet simulator writes what real verl writes, and its labels agree with its files."""

from __future__ import annotations

import argparse
import calendar
import gzip
import json
import math
import re
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from lab.simulate import (
    ANOMALY_CLASSES,
    FAILURE_CLASSES,
    add_arguments,
    fleet_specs,
    generate_run,
    run_from_args,
    simulate_fleet,
)
from lab.simulate.vocab import HANG_EVIDENCE, STOP_REASONS

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = re.compile(r"^\((?:[A-Za-z_]+ )?pid=\d+(?:, ip=[0-9.]+)?\) ?")
STEP = re.compile(r"^step:(\d+)(?: - (.*))?$")
NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
VALUE = {
    "np2": re.compile(rf"^(?:np\.(?:float64|int32)\((?P<w>{NUMBER})\)|(?P<v>{NUMBER}))$"),
    "bare": re.compile(rf"^(?P<v>{NUMBER})$"),
    "v04": re.compile(r"^(?P<v>-?(?:\d+\.\d{3}|nan|inf))$"),
}
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
BAR = re.compile(r"Training Progress:\s+\d+%\|[^|]*\| (\d+)/(\d+) \[([\d:]+)<[^,]*, ([\d.?]+)(s/it|it/s)\]")
# Timestamps a log prints on its own: Python logging / raylet (with the year), vLLM (without it).
DATED = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3}")
VLLM_TS = re.compile(r"\b(?:WARNING|INFO|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d) \[")
TEN_MINUTES = 600
SUFFIXES = (".tar.gz", ".tgz", ".zip", ".log.gz", ".gz", ".log")


def entry_files(entry: Path) -> dict[str, str]:
    """Every file of an archive entry, read independently of the simulator's own helpers."""
    if entry.is_dir():
        return {p.relative_to(entry).as_posix(): p.read_bytes().decode() for p in entry.rglob("*") if p.is_file()}
    if entry.name.endswith(".tar.gz"):
        with tarfile.open(entry) as tar:
            return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar if m.isfile()}
    return {entry.name[:-3]: gzip.decompress(entry.read_bytes()).decode()}


def parse_steps(text: str, fmt: str) -> list[tuple[int, dict[str, float]]]:
    """Every `step:N - k:v` line of a driver log, values parsed with the format's own value regex."""
    out = []
    for raw in text.split("\n"):
        line = PREFIX.sub("", ANSI.sub("", raw))
        m = STEP.match(line)
        if not m:
            continue
        values = {}
        for pair in (m.group(2) or "").split(" - "):
            key, _, val = pair.rpartition(":")
            vm = VALUE[fmt].match(val)
            assert vm, f"{fmt} value {val!r} of {key}"
            values[key] = float(vm.group("w") or vm.group("v")) if fmt == "np2" else float(vm.group("v"))
        out.append((int(m.group(1)), values))
    return out


def plain_lines(text: str) -> list[str]:
    """The log's lines without ANSI colours and Ray prefixes."""
    return [PREFIX.sub("", ANSI.sub("", raw)).lstrip("\r") for raw in text.split("\n")]


def bar_counts(text: str) -> list[int]:
    """The count of every `Training Progress` bar, in log order."""
    return [int(m.group(1)) for m in BAR.finditer(text)]


def hms(text: str) -> int:
    """tqdm's `1:17:48` or `07:16` in seconds."""
    total = 0
    for part in text.split(":"):
        total = total * 60 + int(part)
    return total


def bar_seconds_per_step(line: str) -> float | None:
    """The rate a bar line shows, in seconds per step (None before the first step)."""
    m = BAR.search(line)
    if not m or m.group(4) == "?":
        return None
    rate = float(m.group(4))
    return rate if m.group(5) == "s/it" else 1 / rate


def line_time(line: str, year: str) -> float | None:
    """The timestamp a line carries (vLLM's has no year: the run's is used)."""
    m = DATED.search(line)
    if m:
        return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
    m = VLLM_TS.search(line)
    if m:
        return calendar.timegm(time.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S"))
    return None


def same(a: float, b: float, fmt: str) -> bool:
    if math.isnan(b):
        return math.isnan(a)
    if fmt == "v04":
        return abs(a - b) <= 0.0005 + 1e-9
    return a == b


def expected_lines(spec):
    """(step, values) of every step line the simulator meant to print, in log order."""
    if not spec.step_lines:
        return []  # trainer.logger=['wandb']: no console logger
    trace = generate_run(spec)
    out = []
    for k, seg in enumerate(spec.segments):
        final = k == len(spec.segments) - 1
        # a final launch that dies at start-up or in its first validation prints no step line
        if final and (spec.failure_phase == "startup"
                      or (spec.failure_phase == "testing" and seg.end_step == seg.start_step)):
            break
        _, step, val = trace.val_lines[k]
        out.append((step, val))
        out += [(int(trace.step[i]), trace.step_values(int(i))) for i in np.flatnonzero(trace.segment == k)]
    return out


@pytest.fixture
def fleet(tmp_path):
    labels = simulate_fleet(tmp_path, runs=24, seed=11)
    return tmp_path, labels


def test_every_step_line_parses_back_to_the_values_meant(fleet):
    out, labels = fleet
    specs = {s.run_id: s for s in fleet_specs(24, 11)}
    formats = set()
    for run_id, lab in labels["runs"].items():
        files = entry_files(out / "archive" / lab["entry"])
        got = parse_steps(files[lab["log_file"]], lab["format"])
        want = expected_lines(specs[run_id])
        assert [s for s, _ in got] == [s for s, _ in want], run_id
        for (_, g), (_, w) in zip(got, want, strict=True):
            assert list(g) == list(w)
            assert all(same(g[k], w[k], lab["format"]) for k in w), run_id
        formats.add(lab["format"])
    assert formats == {"np2", "bare", "v04"}


def test_number_formats_follow_the_reference(fleet):
    out, labels = fleet
    seen = {"np2": False, "bare": False, "v04": False}
    for lab in labels["runs"].values():
        text = entry_files(out / "archive" / lab["entry"])[lab["log_file"]]
        lines = [ANSI.sub("", x) for x in text.split("\n") if re.search(r"\) step:[1-9]", ANSI.sub("", x))]
        if not lines:
            continue
        line = lines[0]
        if lab["format"] == "np2":
            assert "actor/pg_loss:np.float64(" in line and "critic/score/mean:np" not in line
            assert re.search(r"training/global_step:\d+ ", line)
        elif lab["format"] == "bare":
            assert "np.float64" not in line and re.search(r"training/global_step:\d+ ", line)
        else:
            assert re.search(r"training/global_step:\d+\.000 ", line)
        seen[lab["format"]] = True
    assert all(seen.values())


def test_jsonl_holds_the_final_segment_with_nan_as_null(fleet):
    out, labels = fleet
    specs = {s.run_id: s for s in fleet_specs(24, 11)}
    checked = 0
    for run_id, lab in labels["runs"].items():
        if not lab["has_jsonl"]:
            continue
        files = entry_files(out / "archive" / lab["entry"])
        records = [json.loads(x) for x in files[lab["jsonl_file"]].splitlines()]
        want = expected_lines(specs[run_id])
        want = want[len(want) - len(records):]
        if records and lab["failure_phase"] != "startup":
            assert records[0]["step"] == lab["segment_start_steps"][-1]  # truncated at the last launch
        for rec, (step, values) in zip(records, want, strict=True):
            assert rec["step"] == step and list(rec["data"]) == list(values)
            for k, v in values.items():
                assert (rec["data"][k] is None) if not math.isfinite(v) else rec["data"][k] == v
        checked += 1
    assert checked


def test_labels_agree_with_the_files(fleet):
    out, labels = fleet
    assert set(labels) >= {"seed", "generator", "failure_classes", "runs"}
    for run_id, lab in labels["runs"].items():
        files = entry_files(out / "archive" / lab["entry"])
        text = files[lab["log_file"]]
        lines = text.split("\n")
        steps = parse_steps(text, lab["format"])
        starts = lab["segment_start_steps"]
        if lab["capture"] == "tee":  # a wandb capture starts after the start-up
            assert len(re.findall(r"Total training steps: (\d+)", text)) == lab["segments"] == len(starts)
            assert int(re.search(r"Total training steps: (\d+)", text).group(1)) == lab["expected_steps"]
        # the last segment's steps begin at its validation line step:N (N = checkpoint step)
        final = [s for s, _ in steps]
        if starts[-1] in final:
            final = final[len(final) - 1 - final[::-1].index(starts[-1]):]
        if lab["step_lines"]:
            assert (max(final) if final else 0) == lab["last_step"], run_id
        else:
            assert not steps and bar_counts(text)[-1] == lab["last_step"], run_id
        assert len({s for s, _ in steps if s > 0}) == lab["n_steps_logged"]
        assert lab["stop_reason"] is None or lab["failure_class"] == "interrupted"
        assert (lab["hang_reason"] is not None) == (lab["failure_class"] == "hang")
        if lab["failure_class"] == "completed":
            assert lab["root_cause_line_no"] is None and lab["last_step"] == lab["expected_steps"]
            assert "Final validation metrics" in text
            continue
        for ep in lab["episodes"]:
            assert 1 <= ep["first_step"] <= ep["last_step"] <= lab["last_step"]
        if lab["failure_class"] == "no_outcome":
            assert lab["root_cause_line_no"] is None and lab["first_error_line_contains"] is None
            continue
        assert lab["root_cause_file"] == lab["log_file"]
        assert lab["first_error_line_contains"] in lines[lab["root_cause_line_no"] - 1], run_id
        if lab["signature"]:
            assert lab["signature"] in text
        if lab["failure_class"] == "hang":
            assert "Traceback" not in "\n".join(lines[lab["root_cause_line_no"] - 40:])


VERBATIM = {
    "cuda_oom": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "ray.exceptions.RayTaskError("],
    "nccl_timeout": [],
    "ray_actor_died": ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                       "class_name: create_colocated_worker_cls.<locals>.WorkerDict"],
    "host_oom_killed": ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
                        "Top 10 memory users:"],
    "python_exception": ["Error executing job with overrides: [",
                         "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."],
    "nan_divergence": ["RuntimeError: probability tensor contains either `inf`, `nan` or element < 0"],
    "unknown": ["Fatal Python error: ", "(core dumped) python3 -m verl.trainer.main_ppo"],
    "hang": [],
    "vllm_engine_error": [],
    "interrupted": [],
    "no_outcome": [],
}
# classes whose verbatim text depends on the engine and the phase: one of these must be present
VERBATIM_ANY = {
    "nccl_timeout": [
        "ProcessGroupNCCL.cpp:616] [Rank",
        "RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED",
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms",
    ],
    "interrupted": [
        "\nKeyboardInterrupt\n",
        "slurmstepd: error: *** JOB ",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process",
        " Terminated              python3 -m verl.trainer.main_ppo",
        "*** SIGTERM received at time=",
    ],
    "vllm_engine_error": [
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        "is larger than the maximum number of tokens that can be stored in KV cache",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "[core.py:586] EngineCore encountered a fatal error.",
        "Scheduler hit an exception: Traceback (most recent call last):",
    ],
}


def test_failure_texts_are_verbatim_and_name_the_phase(tmp_path):
    labels = simulate_fleet(tmp_path, runs=60, seed=5)
    methods = {"gen": "generate_sequences", "old_log_prob": "compute_log_prob", "ref": "compute_ref_log_prob",
               "values": "compute_values", "update_critic": "update_critic", "update_actor": "update_actor"}
    seen, named = set(), 0
    for lab in labels["runs"].values():
        cls = lab["failure_class"]
        if cls == "completed":
            continue
        text = ANSI.sub("", entry_files(tmp_path / "archive" / lab["entry"])[lab["log_file"]])
        for t in VERBATIM[cls]:
            if cls == "cuda_oom" and lab["format"] == "v04":
                t = t.replace("torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError")
            assert t in text, (lab["entry"], t)
        if cls in VERBATIM_ANY:
            assert any(t in text for t in VERBATIM_ANY[cls]), lab["entry"]
        if cls in ("cuda_oom", "ray_actor_died", "nccl_timeout") and lab["failure_phase"] in methods:
            tail = "\n".join(text.split("\n")[lab["root_cause_line_no"] - 60:])
            assert methods[lab["failure_phase"]] in tail, lab["entry"]
            named += 1
        seen.add(cls)
    assert seen == set(FAILURE_CLASSES) - {"completed"}
    assert named >= 5


def test_archives_open_and_map_to_run_ids(fleet):
    out, labels = fleet
    entries = sorted(p.name for p in (out / "archive").iterdir())
    forms = set()
    for name in entries:
        run_id = name
        for suffix in SUFFIXES:
            if run_id.endswith(suffix):
                run_id = run_id[: -len(suffix)]
                break
        assert RUN_ID.match(run_id) and re.search("[A-Za-z]", run_id)
        lab = labels["runs"][run_id]
        assert lab["entry"] == name
        files = entry_files(out / "archive" / name)
        assert lab["log_file"] in files
        for f in lab["worker_log_files"]:
            assert re.fullmatch(r"ray_logs/worker-[0-9a-f]+-[0-9a-f]+-\d+\.err", f) and f in files
        forms.add(lab["archive_form"])
        if name.endswith(".tar.gz"):
            with tarfile.open(out / "archive" / name) as tar:
                assert {m.name.split("/", 1)[0] for m in tar.getmembers()} == {run_id}
    assert len(entries) == len(labels["runs"]) == 24
    assert forms == {"dir", "tar.gz", "gz"}


def test_same_seed_same_bytes(tmp_path):
    def snapshot(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    simulate_fleet(tmp_path / "a", runs=12, seed=4)
    simulate_fleet(tmp_path / "b", runs=12, seed=4)
    simulate_fleet(tmp_path / "c", runs=12, seed=5)
    a, b, c = snapshot(tmp_path / "a"), snapshot(tmp_path / "b"), snapshot(tmp_path / "c")
    assert a == b
    assert a["labels.json"] != c["labels.json"]


def test_a_100_run_fleet_covers_both_vocabularies(fleet100):
    _, labels = fleet100
    runs = labels["runs"].values()
    assert {lab["failure_class"] for lab in runs} == set(FAILURE_CLASSES)
    assert {ep["class"] for lab in runs for ep in lab["episodes"]} == set(ANOMALY_CLASSES)
    healthy = [lab for lab in runs if lab["failure_class"] == "completed" and not lab["episodes"]]
    assert 25 <= len(healthy) <= 45
    assert {lab["format"] for lab in runs} == {"np2", "bare", "v04"}
    assert any(lab["segments"] > 1 for lab in runs) and any(lab["has_jsonl"] for lab in runs)
    assert any(lab["worker_log_files"] for lab in runs)
    assert labels["failure_classes"] == {c: sum(lab["failure_class"] == c for lab in runs) for c in FAILURE_CLASSES}


def test_healthy_dynamics_and_episode_magnitudes():
    specs = fleet_specs(100, 7)
    for spec in specs:
        trace = generate_run(spec)
        if len(trace.step) < 10:
            continue
        v = trace.values
        final = trace.segment == len(spec.segments) - 1
        in_ep = np.zeros(len(trace.step), bool)
        for ep in spec.episodes:
            in_ep |= final & (trace.step >= ep.first_step) & (trace.step <= ep.last_step)
        calm = ~in_ep
        phases = sum(v[k] for k in v if k.startswith("timing_s/") and k.split("/")[1] in
                     ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"))
        assert np.all(v["timing_s/step"] >= phases)  # testing and save_checkpoint are outside the step timer
        share = v["timing_s/gen"][calm] / v["timing_s/step"][calm]
        assert 0.45 <= np.median(share) <= 0.85
        for ep in spec.episodes:
            m = final & (trace.step >= ep.first_step) & (trace.step <= ep.last_step)
            if ep.cls == "kl_spike":
                assert np.all(np.abs(v["actor/ppo_kl"][m]) > 0.05)
                assert np.median(np.abs(v["actor/ppo_kl"][m])) >= 5 * np.median(np.abs(v["actor/ppo_kl"][calm]))
            if ep.cls == "gen_slowdown":
                assert np.median(v["timing_s/gen"][m]) >= 1.4 * np.median(v["timing_s/gen"][calm])
            if ep.cls == "nan_loss":
                assert np.all(np.isnan(v["actor/pg_loss"][m]))
            if ep.cls == "memory_pressure":
                assert np.all(v["perf/max_memory_reserved_gb"][m] >= 0.9 * spec.gpu_total_gb)


def test_steps_scale_and_cli(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([str(tmp_path / "small"), "--runs", "4", "--seed", "1", "--steps-scale", "0.05"])
    assert run_from_args(args) == 0
    small = json.loads((tmp_path / "small" / "labels.json").read_text())
    assert all(lab["expected_steps"] <= 20 for lab in small["runs"].values())
    big = fleet_specs(3, 1, steps_scale=200)
    assert max(s.total_steps for s in big) >= 10_000


@pytest.fixture(scope="module")
def fleet100(tmp_path_factory):
    """A 100-run fleet: every new kind of ending appears in it."""
    out = tmp_path_factory.mktemp("fleet100")
    return out, simulate_fleet(out, runs=100, seed=7)


def runs_where(fleet100, **fields):
    """(labels, plain log lines, raw log text) of the runs whose labels have these values."""
    out, labels = fleet100
    for lab in labels["runs"].values():
        if all(lab[k] == v for k, v in fields.items()):
            files = entry_files(out / "archive" / lab["entry"])
            text = files[lab["log_file"]]
            yield lab, plain_lines(text), text


def test_new_outcomes_appear_a_few_times_per_100_runs(fleet100):
    _, labels = fleet100
    runs = list(labels["runs"].values())
    kinds = {
        **{f"stop:{r}": sum(lab["stop_reason"] == r for lab in runs) for r in STOP_REASONS},
        **{f"hang:{e}": sum(lab["hang_evidence"] == e for lab in runs) for e in HANG_EVIDENCE},
        "no_outcome": sum(lab["failure_class"] == "no_outcome" for lab in runs),
        "rendezvous": sum(lab["rendezvous"] for lab in runs),
        "crash_in_step_1": sum(lab["crash_in_step_1"] for lab in runs),
        "wandb": sum(lab["capture"] == "wandb" for lab in runs),
        "no_step_lines": sum(not lab["step_lines"] for lab in runs),
    }
    assert all(1 <= n <= 10 for n in kinds.values()), kinds
    new = sum(lab["failure_class"] in ("interrupted", "no_outcome") for lab in runs)
    assert new <= 20


def test_ctrl_c_flushes_the_buffered_step_lines_after_the_traceback(fleet100):
    buffered = 0
    for lab, lines, _ in runs_where(fleet100, stop_reason="keyboard"):
        root = lab["root_cause_line_no"] - 1
        assert lines[root] == "KeyboardInterrupt"
        assert "Traceback (most recent call last):" in lines[root - 20:root]
        assert "ray.get(" in "\n".join(lines[root - 20:root])
        after = [int(m.group(1)) for ln in lines[root:] if (m := STEP.match(ln))]
        # tqdm writes to stderr, unbuffered: the bar before the traceback already shows the true count
        assert bar_counts("\n".join(lines[:root]))[-1] == lab["last_step"]
        assert len(after) == lab["buffered_steps"]
        if after:
            assert after[-1] == lab["last_step"]
            buffered += 1
    assert buffered >= 2


def test_slurm_and_sigterm_stops_are_printed_as_the_scheduler_and_shell_do(fleet100):
    seen = set()
    for lab, lines, _ in runs_where(fleet100, failure_class="interrupted"):
        reason = lab["stop_reason"]
        seen.add(reason)
        root = lines[lab["root_cause_line_no"] - 1]
        if reason in ("time_limit", "cancelled"):
            m = re.fullmatch(r"slurmstepd: error: \*\*\* JOB \d+ ON \S+ CANCELLED AT (\S+)( DUE TO TIME LIMIT)? \*\*\*",
                             root)
            assert m and bool(m.group(2)) == (reason == "time_limit"), root
            cancel = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
            last_bar = max(i for i, ln in enumerate(lines) if BAR.search(ln))
            stamps = [t for ln in lines[last_bar:lab["root_cause_line_no"]] if (t := line_time(ln, m.group(1)[:4]))]
            if stamps:  # the job was cut while training went on at its usual pace
                assert cancel - stamps[-1] < TEN_MINUTES
            efficiency = re.search(r"^CPU Efficiency: ([\d.]+)% of \S+ core-walltime$", "\n".join(lines), re.M)
            assert efficiency is None or float(efficiency.group(1)) >= 30
        elif reason == "sigterm":
            assert re.search(r"SIGTERM|Terminated", root)
    assert seen == set(STOP_REASONS)


def test_hangs_show_their_evidence_in_the_log(fleet100):
    seen = set()
    for lab, lines, _ in runs_where(fleet100, failure_class="hang"):
        kind = lab["hang_evidence"]
        seen.add(kind)
        root = lab["root_cause_line_no"] - 1
        bars = [i for i, ln in enumerate(lines[:root + 1]) if BAR.search(ln)]
        step_s = next((r for i in reversed(bars) if (r := bar_seconds_per_step(lines[i])) is not None), 0.0)
        if kind == "timestamps":
            year = lab["first_ts"][:4]
            repeated = [ln for ln in lines[bars[-1]:root + 1] if lab["first_error_line_contains"] in ln]
            stamps = [line_time(ln, year) for ln in repeated]
            assert stamps[-1] - stamps[0] > max(TEN_MINUTES, 3 * step_s), lab["entry"]
            assert str(round((stamps[-1] - stamps[0]) / 60)) in lab["hang_reason"]
        elif kind == "progress_bar":
            first, last = BAR.search(lines[bars[-2]]), BAR.search(lines[bars[-1]])
            assert bars[-1] == root and first.group(1) == last.group(1)
            assert hms(last.group(3)) - hms(first.group(3)) > max(TEN_MINUTES, 3 * step_s)
        elif kind == "debugger":
            assert lines[root].startswith("Waiting for debugger to attach")
            assert lines[root - 1].startswith("Ray debugger is listening on")
        else:
            assert re.search(r"CANCELLED AT \S+ DUE TO TIME LIMIT", "\n".join(lines[:root]))
            assert float(re.match(r"CPU Efficiency: ([\d.]+)%", lines[root]).group(1)) < 2
        assert lab["hang_reason"]
    assert seen == set(HANG_EVIDENCE)


def test_no_outcome_logs_just_end_without_error_or_stall(fleet100):
    checked = 0
    for lab, lines, text in runs_where(fleet100, failure_class="no_outcome"):
        last_bar = max(i for i, ln in enumerate(lines) if BAR.search(ln))
        tail = lines[last_bar:]
        assert not any(re.search(r"Traceback|Error|KeyboardInterrupt|CANCELLED|SIGTERM|debugger", ln) for ln in tail)
        stamps = [t for ln in tail if (t := line_time(ln, lab["first_ts"][:4]))]
        # a stall (stalls.py) outlasts ten minutes and three steps at the pace the progress bar shows
        assert not stamps or stamps[-1] - stamps[0] < max(TEN_MINUTES, 3 * (bar_seconds_per_step(lines[last_bar]) or 0))
        assert bar_counts(text)[-1] == lab["last_step"]
        checked += 1
    assert checked >= 3


def test_rendezvous_failures_end_the_engine_start_up(fleet100):
    engines = set()
    for lab, lines, text in runs_where(fleet100, rendezvous=True):
        assert (lab["failure_class"], lab["failure_phase"], lab["last_step"]) == ("nccl_timeout", "startup", 0)
        root = lines[lab["root_cause_line_no"] - 1]
        assert "nonce == returnedNonce INTERNAL ASSERT FAILED" in root or "The client socket has timed out" in root
        assert not any(STEP.match(ln) for ln in lines) and "Watchdog caught" not in text
        assert "self.actor_rollout_wg.init_model()" in text
        engines.add("sglang" if "sglang" in root or "TCPStore.cpp\":418" in root else "vllm")
    assert engines


def test_crashes_inside_step_1_come_after_the_initial_validation(fleet100):
    methods = {"gen": "generate_sequences", "old_log_prob": "compute_log_prob", "ref": "compute_ref_log_prob",
               "values": "compute_values", "update_critic": "update_critic", "update_actor": "update_actor",
               "reward": "compute_reward"}
    checked = 0
    for lab, lines, _ in runs_where(fleet100, crash_in_step_1=True):
        root = lab["root_cause_line_no"] - 1
        before = "\n".join(lines[:root])
        assert lab["last_step"] == 0 and lab["failure_phase"] in methods, lab["entry"]
        assert re.search(r"^step:0 - val-", before, re.M)
        assert f"| 0/{lab['expected_steps']} [00:00<?, ?it/s]" in before
        assert "self.actor_rollout_wg.init_model()" not in "\n".join(lines)
        assert methods[lab["failure_phase"]] in "\n".join(lines[root - 80:root + 80])
        checked += 1
    assert checked >= 3


def test_wandb_run_folders_hold_the_console_capture_and_wandb_files(fleet100):
    out, _ = fleet100
    checked = 0
    for lab, lines, text in runs_where(fleet100, capture="wandb"):
        assert lab["failure_phase"] in (None, "reward", "testing")  # what the TaskRunner's own output can show
        folder = lab["log_file"].rsplit("/", 1)[0]
        assert re.fullmatch(r"wandb/run-\d{8}_\d{6}-[a-z0-9]{8}/files", folder)
        files = entry_files(out / "archive" / lab["entry"])
        assert set(files) == {f"{folder}/{name}" for name in
                              ("output.log", "config.yaml", "wandb-summary.json", "wandb-metadata.json")}
        # the TaskRunner's own console from wandb.init on: no Ray prefixes, no colours, no start-up
        assert not re.search(r"^\((?:\w+ )?pid=\d+|\x1b\[", text, re.M)
        assert "Total training steps" not in text and "Checkpoint tracker file" in lines[0] + lines[2]
        summary = json.loads(files[f"{folder}/wandb-summary.json"])
        assert summary["_step"] == lab["last_step"]
        assert json.loads(files[f"{folder}/wandb-metadata.json"])["startedAt"].startswith(lab["first_ts"])
        config = files[f"{folder}/config.yaml"]
        assert "trainer:\n    value:\n" in config and f"        experiment_name: {lab['experiment_name']}" in config
        checked += 1
    assert checked >= 3


def test_runs_without_step_lines_count_their_steps_on_the_progress_bar(fleet100):
    checked = 0
    for lab, lines, text in runs_where(fleet100, step_lines=False):
        assert not parse_steps(text, lab["format"]) and "'logger': ['wandb']," in "\n".join(lines)
        assert bar_counts(text)[-1] == lab["last_step"] > 0
        assert lab["n_steps_logged"] == 0 and lab["episodes"] == []
        checked += 1
    assert checked >= 3
