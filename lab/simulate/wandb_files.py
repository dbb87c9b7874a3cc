"""A wandb run folder as wandb leaves it: `wandb/run-<YYYYMMDD_HHMMSS>-<id>/files/`.

`output.log` is the TaskRunner's console capture (written by the driver-log composer); next to it
`config.yaml` (the resolved config, each key under `value:`), `wandb-summary.json` (the last logged
step's metrics, one line) and `wandb-metadata.json` (the host and the command, indented).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from .config_dump import overrides, resolved_config
from .dynamics import RunTrace
from .metric_keys import INT_KEYS, NP_INT32_KEYS
from .startup import WANDB_VERSION

PYTHON_VERSION = "3.10.12"
_PLAIN = re.compile(r"^[A-Za-z_/$.][\w./$@=+-]*$")
_KEYWORDS = {"true", "false", "yes", "no", "on", "off", "null", "none", "~"}


def write_wandb_files(files_dir: Path, trace: RunTrace, started: float, ended: float) -> None:
    """Write config.yaml, wandb-summary.json and wandb-metadata.json into `files_dir` (output.log is there)."""
    spec = trace.spec
    wandb_meta = {"cli_version": WANDB_VERSION, "m": [], "python_version": PYTHON_VERSION,
                  "t": {"1": [1, 11, 41, 49, 55, 71, 105], "2": [1, 11, 41, 49, 55, 71, 105],
                        "3": [2, 13, 16, 23, 55, 61], "4": PYTHON_VERSION, "5": WANDB_VERSION, "8": [5],
                        "12": WANDB_VERSION, "13": "linux-x86_64"}}
    config = {"_wandb": wandb_meta, **resolved_config(spec)}
    yaml_lines = _yaml({key: {"value": value} for key, value in sorted(config.items())}, 0)
    (files_dir / "config.yaml").write_text("\n".join(yaml_lines) + "\n", encoding="utf-8")
    (files_dir / "wandb-summary.json").write_text(json.dumps(_summary(trace, ended - started, ended)),
                                                  encoding="utf-8")
    (files_dir / "wandb-metadata.json").write_text(json.dumps(_metadata(trace, started), indent=4), encoding="utf-8")


def _summary(trace: RunTrace, runtime: float, ended: float) -> dict:
    """The metrics of the last step wandb received, then wandb's own bookkeeping keys."""
    spec = trace.spec
    if len(trace.step):
        step, values = int(trace.step[-1]), trace.step_values(len(trace.step) - 1)
    else:
        _, step, values = trace.val_lines[-1]
    summary: dict = {key: int(value) if key in INT_KEYS or key in NP_INT32_KEYS else value
                     for key, value in values.items() if math.isfinite(value)}
    summary.update({"_timestamp": round(ended, 6), "_runtime": round(runtime, 6), "_step": step,
                    "_wandb": {"runtime": int(runtime)}})
    if spec.failure_class == "completed":
        summary["_wandb"]["exit_code"] = 0
    return summary


def _metadata(trace: RunTrace, started: float) -> dict:
    spec = trace.spec
    gpu = {79.11: "NVIDIA H100 80GB HBM3", 79.25: "NVIDIA A100-SXM4-80GB", 94.5: "NVIDIA H100 NVL",
           139.81: "NVIDIA H200"}[spec.gpu_total_gb]
    return {
        "os": "Linux-5.15.0-105-generic-x86_64-with-glibc2.35",
        "python": f"CPython {PYTHON_VERSION}",
        "startedAt": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)) + f".{int(started % 1 * 1e6):06d}Z",
        "args": overrides(spec),
        "program": "-m verl.trainer.main_ppo",
        "git": {"remote": "https://github.com/volcengine/verl.git", "commit": f"{spec.seed:040x}"[-40:]},
        "root": f"/workspace/{spec.project}",
        "host": spec.hostname,
        "executable": "/usr/bin/python3",
        "cpu_count": 64,
        "cpu_count_logical": 128,
        "gpu": gpu,
        "gpu_count": spec.n_gpus_per_node,
        "memory": {"total": "2164154966016"},
        "gpu_nvidia": [{"name": gpu, "memoryTotal": str(int(spec.gpu_total_gb * 2**30)), "architecture": "Hopper"}
                       for _ in range(spec.n_gpus_per_node)],
        "cudaVersion": "12.4",
    }


def _yaml(value: dict, indent: int) -> list[str]:
    """Block-style YAML of nested dicts and lists of scalars, four spaces per level, keys sorted."""
    pad = " " * indent
    lines = []
    for key in sorted(value, key=str):
        item = value[key]
        head = f"{pad}{_scalar(str(key))}:"
        if isinstance(item, dict) and item:
            lines += [head, *_yaml(item, indent + 4)]
        elif isinstance(item, list) and item:
            lines += [head, *(f"{pad}    - {_scalar(x)}" for x in item)]
        else:
            lines.append(f"{head} {_scalar(item)}")
    return lines


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value == {}:
        return "{}"
    if value == []:
        return "[]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _KEYWORDS:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
