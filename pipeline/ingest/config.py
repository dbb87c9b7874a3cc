"""The resolved-config pprint printed at start-up, and the run facts taken from it."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

PREFIX = re.compile(r"^\([^)]*\) ")
# a pprint continuation line: indented, then a key/string, number, literal or bracket (other output of
# the same process, e.g. a warning on stderr, can be interleaved and is skipped)
CONTINUATION = re.compile(r"""^\s*(?:'|"|[-\d.{}\[\]():,]|None\b|True\b|False\b|inf\b|nan\b)""")
BARE_FLOATS = re.compile(r"(?<=[\s:\[(,])(-?inf|nan)(?=[,\]})\s]|$)")
TOTAL_STEPS = re.compile(r"Total training steps: (?P<n>\d+)")
MAX_CONFIG_LINES = 20_000

# runs column -> path in the resolved config
CONFIG_FIELDS: dict[str, tuple[str, ...]] = {
    "project_name": ("trainer", "project_name"),
    "experiment_name": ("trainer", "experiment_name"),
    "model_path": ("actor_rollout_ref", "model", "path"),
    "rollout_engine": ("actor_rollout_ref", "rollout", "name"),
    "adv_estimator": ("algorithm", "adv_estimator"),
    "strategy": ("actor_rollout_ref", "actor", "strategy"),
    "n_gpus_per_node": ("trainer", "n_gpus_per_node"),
    "nnodes": ("trainer", "nnodes"),
    "rollout_n": ("actor_rollout_ref", "rollout", "n"),
    "rollout_tp": ("actor_rollout_ref", "rollout", "tensor_model_parallel_size"),
    "train_batch_size": ("data", "train_batch_size"),
    "ppo_mini_batch_size": ("actor_rollout_ref", "actor", "ppo_mini_batch_size"),
    "ppo_micro_batch_size_per_gpu": ("actor_rollout_ref", "actor", "ppo_micro_batch_size_per_gpu"),
    "max_prompt_length": ("data", "max_prompt_length"),
    "max_response_length": ("data", "max_response_length"),
    "total_training_steps": ("trainer", "total_training_steps"),
    "test_freq": ("trainer", "test_freq"),
    "save_freq": ("trainer", "save_freq"),
    "gpu_memory_utilization": ("actor_rollout_ref", "rollout", "gpu_memory_utilization"),
    "actor_lr": ("actor_rollout_ref", "actor", "optim", "lr"),
}
STRING_FIELDS = (
    "project_name",
    "experiment_name",
    "model_path",
    "rollout_engine",
    "adv_estimator",
    "strategy",
)
FLOAT_FIELDS = ("gpu_memory_utilization", "actor_lr")
INT_FIELDS = tuple(k for k in CONFIG_FIELDS if k not in STRING_FIELDS + FLOAT_FIELDS)


def bracket_delta(line: str) -> int:
    """Opening minus closing brackets outside quoted strings."""
    depth, quote, escaped = 0, "", False
    for ch in line:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
    return depth


class ConfigCollector:
    """Collects the lines of one pprint block (lines from the same Ray process) until it closes."""

    def __init__(self, first_line: str):
        m = PREFIX.match(first_line)
        self.prefix = m.group(0) if m else ""
        self.parts: list[str] = []
        self.depth = 0
        self.n_seen = 0
        self.done = False

    def feed(self, line: str) -> bool:
        """Offer the next line; True if it belongs to the block."""
        self.n_seen += 1
        if self.prefix:
            if not line.startswith(self.prefix):
                return False
            body = line[len(self.prefix) :]
        else:
            if PREFIX.match(line):
                return False
            body = line
        if self.parts and not CONTINUATION.match(body):
            return False
        self.parts.append(body)
        self.depth += bracket_delta(body)
        if self.depth <= 0 or self.n_seen > MAX_CONFIG_LINES:
            self.done = True
        return True

    def parse(self) -> tuple[dict | None, str | None]:
        """The config dict, or None and why not."""
        if self.depth > 0:
            return None, f"config pprint not closed after {len(self.parts)} lines (log truncated?)"
        text = BARE_FLOATS.sub(
            lambda m: "None" if m.group(1) == "nan" else m.group(1)[:-3] + "1e999", "\n".join(self.parts)
        )
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            return None, f"config pprint could not be parsed ({type(exc).__name__})"
        if not isinstance(value, dict):
            return None, "config pprint is not a dict"
        return value, None


def _get(cfg: dict, path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for part in path:
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


# a W&B run folder's copy of the config the run logged (verl logs its whole config to W&B)
WANDB_CONFIG = re.compile(r"(?:^|/)wandb/(?:offline-)?run-[^/]+/files/config\.yaml$|^files/config\.yaml$")
WANDB_CONFIG_MAX_BYTES = 8 << 20


def wandb_config(data: bytes, name: str, problems: list[str]) -> dict | None:
    """The run config in a W&B `config.yaml` (each top-level key holds `{desc, value}`), or None."""
    import yaml

    if len(data) >= WANDB_CONFIG_MAX_BYTES:
        problems.append(f"{name}: larger than {WANDB_CONFIG_MAX_BYTES >> 20} MB: not read as the config")
        return None
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        problems.append(f"{name}: W&B config could not be parsed ({type(exc).__name__})")
        return None
    if not isinstance(doc, dict):
        return None
    return {k: v.get("value") if isinstance(v, dict) and "value" in v else v
            for k, v in doc.items() if not str(k).startswith("_")}


def config_facts(cfg: dict | None, total_steps_line: int | None) -> dict[str, Any]:
    """The `runs` config columns from a resolved config and the `Total training steps: N` line."""
    facts: dict[str, Any] = {k: None for k in CONFIG_FIELDS}
    if cfg is not None:
        for col, path in CONFIG_FIELDS.items():
            v = _get(cfg, path)
            if col in STRING_FIELDS:
                facts[col] = None if v is None else str(v)
            elif col in FLOAT_FIELDS:
                facts[col] = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
            else:
                facts[col] = int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    # verl writes the total it computed into the optimizer's config before logging the config to W&B
    optim_total = _get(cfg or {}, ("actor_rollout_ref", "actor", "optim", "total_training_steps"))
    if facts["total_training_steps"] is None and isinstance(optim_total, int) and optim_total > 0:
        facts["total_training_steps"] = optim_total
    if total_steps_line is not None:
        facts["total_training_steps"] = total_steps_line
    facts["config_json"] = None if cfg is None else json.dumps(cfg, default=str, sort_keys=True)
    return facts
