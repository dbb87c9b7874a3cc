"""Hand-made lake fixtures shaped exactly like architecture.md's `runs`, `log_lines` and `step_metrics`."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from pipeline.lake import write_run_table

RUNS_SCHEMA = pa.schema([
    ("source_path", pa.string()), ("archive_form", pa.string()), ("n_files", pa.int64()),
    ("n_lines", pa.int64()), ("n_bytes", pa.int64()), ("n_undecodable_lines", pa.int64()),
    ("n_step_lines", pa.int64()), ("n_steps", pa.int64()), ("n_metric_values", pa.int64()),
    ("n_parse_failures", pa.int64()), ("n_segments", pa.int32()), ("problems", pa.list_(pa.string())),
    ("first_ts", pa.timestamp("us")), ("last_ts", pa.timestamp("us")), ("mtime", pa.timestamp("us")),
    ("ingested_at", pa.timestamp("us")),
    ("project_name", pa.string()), ("experiment_name", pa.string()), ("model_path", pa.string()),
    ("rollout_engine", pa.string()), ("adv_estimator", pa.string()), ("strategy", pa.string()),
    ("n_gpus_per_node", pa.int64()), ("nnodes", pa.int64()), ("rollout_n", pa.int64()), ("rollout_tp", pa.int64()),
    ("train_batch_size", pa.int64()), ("ppo_mini_batch_size", pa.int64()),
    ("ppo_micro_batch_size_per_gpu", pa.int64()), ("max_prompt_length", pa.int64()),
    ("max_response_length", pa.int64()), ("total_training_steps", pa.int64()), ("test_freq", pa.int64()),
    ("save_freq", pa.int64()), ("gpu_memory_utilization", pa.float64()), ("actor_lr", pa.float64()),
    ("config_json", pa.string()), ("verl_format", pa.string()),
])
LOG_LINES_SCHEMA = pa.schema([
    ("file", pa.string()), ("line_no", pa.int64()), ("text", pa.string()), ("kind", pa.string()),
    ("component", pa.string()), ("pid", pa.int64()), ("segment", pa.int32()), ("step", pa.int64()),
    ("phase_hint", pa.string()), ("ts", pa.timestamp("us")),
])
STEP_METRICS_SCHEMA = pa.schema([
    ("step", pa.int64()), ("key", pa.string()), ("value", pa.float64()), ("source", pa.string()),
    ("segment", pa.int32()), ("file", pa.string()), ("line_no", pa.int64()),
])

PREFIX = re.compile(r"^\((?P<comp>[A-Za-z_]\w*)?\s?pid=(?P<pid>\d+)[^)]*\)\s|^\((?P<raylet>raylet)\)\s")


def step_line(step: int, metrics: dict[str, float]) -> str:
    """A console step line in the bare (numpy 1.x) format."""
    return " - ".join([f"step:{step}"] + [f"{k}:{v!r}" for k, v in metrics.items()])


class RunBuilder:
    """Collects the lines of one run file by file and writes the three lake tables like ingest would."""

    def __init__(self, run_id: str, **config):
        self.run_id = run_id
        self.config = {"n_gpus_per_node": 8, "nnodes": 1, "rollout_n": 4, "rollout_tp": 2, "train_batch_size": 64,
                       "ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 2, "experiment_name": "exp",
                       "model_path": "Qwen/Qwen2.5-0.5B-Instruct", "rollout_engine": "vllm",
                       "gpu_memory_utilization": 0.5, **config}
        self.lines: list[dict] = []
        self.metrics: list[dict] = []
        self.segment = 0
        self.last_step = {0: 0}

    def line(self, text: str, kind: str = "other", file: str = "train.log", phase: str | None = None, ts=None):
        """Add a line; the Ray prefix gives component and pid, the segment's progress gives `step`."""
        m = PREFIX.match(text)
        comp = pid = None
        if m:
            comp = m.group("raylet") or m.group("comp") or "pid"
            pid = int(m.group("pid")) if m.group("pid") else None
        no = 1 + sum(1 for ln in self.lines if ln["file"] == file)
        self.lines.append({"file": file, "line_no": no, "text": text, "kind": kind, "component": comp, "pid": pid,
                           "segment": self.segment, "step": self.last_step.get(self.segment, 0) + 1,
                           "phase_hint": phase, "ts": ts})
        return no

    def restart(self):
        """A new start-up block (resume)."""
        self.segment += 1
        self.last_step[self.segment] = 0

    def step(self, step: int, metrics: dict[str, float], file: str = "train.log", ts=None):
        """A step line; its values replace earlier segments' values of the same step and key."""
        no = self.line("(TaskRunner pid=100) " + step_line(step, metrics), "step_metrics", file, ts=ts)
        self.metrics = [m for m in self.metrics if not (m["step"] == step and m["key"] in metrics)]
        for k, v in metrics.items():
            self.metrics.append({"step": step, "key": k, "value": float(v), "source": "console",
                                 "segment": self.segment, "file": file, "line_no": no})
        if step > 0 or self.last_step[self.segment] == 0:
            self.last_step[self.segment] = step

    def write(self, warehouse: Path):
        """Write runs, log_lines and step_metrics partitions."""
        ts = [ln["ts"] for ln in self.lines if ln["ts"] is not None]
        row = {name: None for name in RUNS_SCHEMA.names}
        row.update(self.config)
        row.update(source_path=f"/archive/{self.run_id}", archive_form="dir",
                   n_files=len({ln["file"] for ln in self.lines}), n_lines=len(self.lines), n_bytes=0,
                   n_undecodable_lines=0, n_step_lines=sum(ln["kind"] == "step_metrics" for ln in self.lines),
                   n_steps=len({m["step"] for m in self.metrics}), n_metric_values=len(self.metrics),
                   n_parse_failures=0, n_segments=self.segment + 1, problems=[],
                   first_ts=min(ts) if ts else None, last_ts=max(ts) if ts else None, verl_format="bare")
        write_run_table(warehouse, "runs", self.run_id, pa.Table.from_pylist([row], RUNS_SCHEMA))
        write_run_table(warehouse, "log_lines", self.run_id, pa.Table.from_pylist(self.lines, LOG_LINES_SCHEMA))
        write_run_table(warehouse, "step_metrics", self.run_id, pa.Table.from_pylist(self.metrics, STEP_METRICS_SCHEMA))


def timings(gen=10.0, reward=1.0, old_log_prob=3.0, ref=2.0, adv=0.5, update_actor=8.0, other=0.5, **extra):
    """A step's metrics: timers that sum to `timing_s/step`, plus a few health signals."""
    phases = {"timing_s/gen": gen, "timing_s/reward": reward, "timing_s/old_log_prob": old_log_prob,
              "timing_s/ref": ref, "timing_s/adv": adv, "timing_s/update_actor": update_actor}
    out = {"actor/pg_loss": -0.01, "actor/ppo_kl": 0.001, "actor/entropy": 0.4, "actor/grad_norm": 0.3,
           "critic/score/mean": 0.5, "response_length/mean": 200.0, "perf/total_num_tokens": 40000,
           **phases, "timing_s/step": sum(phases.values()) + other}
    out.update(extra)
    return out
