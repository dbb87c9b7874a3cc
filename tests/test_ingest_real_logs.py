"""Every real verl log: all lines kept, every visible step line parsed with every numeric pair.

The expected counts mirror `../shared/tools/check_real_logs.py`: lines = `\\n` count (+1 for a last
line without `\\n`); a step line is `step:N - ...` after a start, `)` or space, in any `\\r` part.
"""

from __future__ import annotations

import math
import re

import pytest
from conftest import SHARED

from pipeline.ingest import run_id_for
from tests.test_ingest_helpers import read_table

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"(?:^|\)\s|\s)step:(\d+) - (.*)$")
NUM = re.compile(r"^(?:np\.(?:float|int|uint)\d+\()?[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)\)?$")
# one case per real log; without ../shared one case whose fixture says what is missing
LOGS = sorted(p.name for p in (SHARED / "real-logs").glob("*.log")) or ["no-real-logs"]


def _expected(data: bytes) -> tuple[int, dict[int, set[str]]]:
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    want: dict[int, set[str]] = {}
    for line in ANSI.sub("", data.decode("utf-8", "replace")).split("\n"):
        for part in line.split("\r"):
            m = STEP.search(part)
            if m:
                pairs = [i.rsplit(":", 1) for i in m.group(2).split(" - ") if ":" in i]
                keys = {k for k, v in pairs if NUM.match(v.strip())}
                step = int(m.group(1))
                if len(keys) > len(want.get(step, ())):
                    want[step] = keys
    return n_lines, want


@pytest.fixture(scope="module")
def ingested(analyzed_real_logs, real_logs_dir):
    """The session's warehouse of the real logs: per log file its run_id and `runs` row."""
    warehouse = analyzed_real_logs.warehouse
    runs = {}
    for log in sorted(real_logs_dir.glob("*.log")):
        run_id = run_id_for(log.name)
        runs[log.name] = (run_id, read_table(warehouse, "runs", run_id)[0])
    return runs, warehouse


@pytest.mark.parametrize("name", LOGS)
def test_real_log_lines_and_pairs(ingested, real_logs_dir, name):
    """Every line kept, numbered 1..n, and every numeric pair of every step line parsed."""
    runs, warehouse = ingested
    run_id, run = runs[name]
    n_lines, want = _expected((real_logs_dir / name).read_bytes())
    lines = read_table(warehouse, "log_lines", run_id)
    assert len(lines) == n_lines == run["n_lines"]
    assert [ln["line_no"] for ln in lines] == list(range(1, n_lines + 1))
    got: dict[int, set[str]] = {}
    for m in read_table(warehouse, "step_metrics", run_id):
        got.setdefault(m["step"], set()).add(m["key"])
    for step, keys in want.items():
        assert keys <= got.get(step, set()), f"step {step}: missing {sorted(keys - got.get(step, set()))[:5]}"


def _printed_values(data: bytes) -> dict[tuple[int, str], float]:
    """The value printed for each (step, key), the last print winning (a resume repeats steps)."""
    values: dict[tuple[int, str], float] = {}
    for line in ANSI.sub("", data.decode("utf-8", "replace")).split("\n"):
        for part in line.split("\r"):
            m = STEP.search(part)
            if m:
                for item in m.group(2).split(" - "):
                    key, _, raw = item.rpartition(":")
                    raw = raw.strip()
                    if key and NUM.match(raw):
                        # the wrapper's `)` is missing where the line was cut (log 15 at 4,096 bytes)
                        values[(int(m.group(1)), key)] = float(re.sub(r"^np\.\w+\(|\)$", "", raw))
    return values


@pytest.mark.parametrize("name", LOGS)
def test_real_log_values_equal_the_printed_ones(ingested, real_logs_dir, name):
    """The value kept for each (step, key) is the one the log printed last."""
    runs, warehouse = ingested
    run_id, _ = runs[name]
    printed = _printed_values((real_logs_dir / name).read_bytes())
    got = {(m["step"], m["key"]): m["value"] for m in read_table(warehouse, "step_metrics", run_id)}
    wrong = [(k, v, got.get(k)) for k, v in printed.items()
             if not (k in got and (got[k] == v or (math.isnan(v) and math.isnan(got[k]))))]
    assert not wrong, wrong[:5]


def test_real_log_config_extraction(ingested):
    """The config facts of two logs, as their config pprint shows them."""
    runs, _ = ingested
    by_prefix = {name[:2]: run for name, (_, run) in runs.items()}
    run29 = by_prefix["29"]
    assert run29["project_name"] == "verl_example" and run29["experiment_name"] == "smol135m_grpo"
    assert run29["rollout_engine"] == "vllm" and run29["rollout_n"] == 8 and run29["rollout_tp"] == 1
    assert run29["gpu_memory_utilization"] == 0.7 and run29["actor_lr"] == 1e-6
    assert run29["train_batch_size"] == 128 and run29["ppo_mini_batch_size"] == 16
    assert run29["max_response_length"] == 128 and run29["total_training_steps"] == 140
    assert run29["adv_estimator"] == "grpo" and run29["n_gpus_per_node"] == 1 and run29["nnodes"] == 1
    assert run29["strategy"] == "fsdp" and run29["test_freq"] == 5 and run29["config_json"]
    assert run29["verl_format"] == "bare"
    run08 = by_prefix["08"]
    assert run08["n_segments"] == 2 and run08["total_training_steps"] == 210
    assert run08["verl_format"] == "v04"
    for name, (_, run) in runs.items():
        assert not any("config pprint" in p for p in run["problems"]), (name, run["problems"])


def test_real_log_wrapped_fragment_reported(ingested):
    """Log 27's hard-wrapped step line leaves a fragment without a step number, and says so."""
    runs, _ = ingested
    [(_, run)] = [v for k, v in runs.items() if k.startswith("27_")]
    assert any("without a step number" in p for p in run["problems"])
