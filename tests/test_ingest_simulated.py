"""Ingest of a simulated fleet, checked against the simulator's labels and its own files."""

from __future__ import annotations

import gzip
import json
import math
import tarfile
from pathlib import Path

import pytest

from lab.simulate import simulate_fleet
from pipeline.ingest import discover_runs, ingest_run
from tests.test_ingest_helpers import read_table

CONFIG_FIELDS = (
    "project_name", "experiment_name", "model_path", "rollout_engine", "adv_estimator", "strategy",
    "n_gpus_per_node", "nnodes", "rollout_n", "rollout_tp", "train_batch_size", "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu", "max_prompt_length", "max_response_length", "total_training_steps",
    "test_freq", "save_freq", "gpu_memory_utilization", "actor_lr",
)  # fmt: skip


def read_entry_text(entry: Path) -> dict[str, str]:
    """Every file of a simulated entry (line endings untouched), keyed by its path inside the run."""
    if entry.is_dir():
        return {
            p.relative_to(entry).as_posix(): p.read_bytes().decode()
            for p in sorted(entry.rglob("*"))
            if p.is_file()
        }
    if entry.name.endswith(".tar.gz"):
        with tarfile.open(entry, "r:gz") as tar:
            return {
                m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()
                for m in tar.getmembers()
                if m.isfile()
            }
    with gzip.open(entry, "rb") as fh:
        return {entry.name[: -len(".gz")]: fh.read().decode()}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    labels = simulate_fleet(out, runs=12, seed=3)["runs"]
    warehouse = out / "wh"
    found = discover_runs(out / "archive", quiet_period_s=0)
    assert not found.errors
    results = {e.run_id: (e, ingest_run(e, warehouse)) for e in found.entries}
    return labels, warehouse, results


def test_every_run_found(fleet):
    labels, _, results = fleet
    assert set(results) == set(labels)
    assert {e.form for e, _ in results.values()} <= {"dir", "tar.gz", "gz"}


def test_lines_kept_per_file(fleet):
    labels, warehouse, results = fleet
    for rid, (entry, result) in results.items():
        want = {}
        for name, text in read_entry_text(entry.path).items():
            want[name] = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        got = {}
        for ln in read_table(warehouse, "log_lines", rid):
            got[ln["file"]] = got.get(ln["file"], 0) + 1
        assert got == {k: v for k, v in want.items() if v}, rid
        assert result.n_lines == sum(want.values())


def test_steps_segments_config_against_labels(fleet):
    labels, warehouse, results = fleet
    for rid, (_, result) in results.items():
        lab = labels[rid]
        run = read_table(warehouse, "runs", rid)[0]
        metrics = read_table(warehouse, "step_metrics", rid)
        steps = {m["step"] for m in metrics if m["source"] in ("console", "jsonl")}
        assert max(steps, default=0) == lab["last_step"], rid
        assert len({s for s in steps if s >= 1}) == lab["n_steps_logged"], rid
        assert run["n_segments"] == lab["segments"], rid
        assert run["verl_format"] == (lab["format"] if steps else "none"), rid
        assert str(run["first_ts"]).replace(" ", "T") == lab["first_ts"], rid
        assert {f: run[f] for f in CONFIG_FIELDS} == {f: lab[f] for f in CONFIG_FIELDS}, rid
        assert result.n_parse_failures == 0, rid
        if lab["root_cause_file"]:
            lines = read_table(warehouse, "log_lines", rid)
            (cause,) = [
                ln
                for ln in lines
                if (ln["file"], ln["line_no"]) == (lab["root_cause_file"], lab["root_cause_line_no"])
            ]
            assert lab["first_error_line_contains"] in cause["text"], rid


def test_console_values_match_the_jsonl_logger(fleet):
    """The simulator writes the same values to both sinks: the kept console value equals the JSONL one."""
    labels, warehouse, results = fleet
    checked = 0
    for rid in results:
        if not labels[rid]["has_jsonl"]:
            continue
        metrics = read_table(warehouse, "step_metrics", rid)
        last = max(m["segment"] for m in metrics)
        console = {
            (m["step"], m["key"]): m["value"]
            for m in metrics
            if m["source"] == "console" and m["segment"] == last
        }
        jsonl_file = labels[rid]["jsonl_file"]
        for line in read_entry_text(results[rid][0].path)[jsonl_file].splitlines():
            row = json.loads(line)
            for key, value in row["data"].items():
                kept = console.get((row["step"], key))
                if kept is None or value is None or isinstance(value, str):
                    continue
                tol = 5e-4 if labels[rid]["format"] == "v04" else 1e-12
                assert math.isclose(kept, value, rel_tol=tol, abs_tol=tol), (rid, row["step"], key)
                checked += 1
    assert checked > 100
