"""The resolved-config pprint printed at start-up, and the run facts taken from it."""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.credentials import mask_config, mask_secrets

from .lines import true_mask

PREFIX_RE = r"^\([^)]*\) "
PREFIX = re.compile(PREFIX_RE)
# a pprint continuation line: indented, then a key/string, number, literal or bracket (other output of
# the same process, e.g. a warning on stderr, can be interleaved and is skipped)
CONTINUATION = re.compile(r"""^\s*(?:'|"|[-\d.{}\[\]():,]|None\b|True\b|False\b|inf\b|nan\b)""")
# a quoted string and what it escapes, to its closing quote or the end of the line
QUOTED_RE = r"""'(?:[^'\\]|\\.)*(?:'|\\?$)|"(?:[^"\\]|\\.)*(?:"|\\?$)"""
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


_BRACKET = np.zeros(256, dtype=np.int64)
_BRACKET[np.frombuffer(b"{[(", np.uint8)] = 1
_BRACKET[np.frombuffer(b"}])", np.uint8)] = -1


def bracket_deltas(lines: pa.StringArray) -> np.ndarray:
    """Per line: opening minus closing brackets outside quoted strings (a quote left open runs to the end)."""
    bare = pc.replace_substring_regex(lines, QUOTED_RE, "")
    if len(bare) == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.frombuffer(bare.buffers()[1], dtype=np.int32)[bare.offset : bare.offset + len(bare) + 1]
    data = np.frombuffer(bare.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    running = np.concatenate([[0], np.cumsum(_BRACKET[data])])  # brackets are ASCII: never inside a UTF-8 character
    at = offsets - offsets[0]
    return running[at[1:]] - running[at[:-1]]


class ConfigCollector:
    """Collects the lines of one pprint block (lines from the same Ray process) until it closes."""

    def __init__(self, first_line: str):
        m = PREFIX.match(first_line)
        self.prefix = m.group(0) if m else ""
        self.parts: list[pa.Array] = []  # the bodies of the block's lines, a block of the log at a time
        self.depth = 0
        self.n_seen = 0
        self.done = False

    def take(self, text: pa.StringArray, start: int) -> tuple[np.ndarray, int]:
        """Offer `text[start:]` line by line until the block closes: the positions of the lines that belong
        to it, and how many lines were offered (all the rest unless it closed)."""
        taken: list[np.ndarray] = []
        pos, size = start, 512  # a dump is a few hundred lines: the windows grow from there
        while pos < len(text) and not self.done:
            window = text.slice(pos, size)
            belongs, offered = self._offer(window)
            taken.append(pos + belongs)
            pos += offered
            size *= 4
        return (np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)), pos - start

    def _offer(self, lines: pa.StringArray) -> tuple[np.ndarray, int]:
        """The lines of `lines` that belong to the block (up to the one closing it), and how many were offered."""
        m = len(lines)
        if self.prefix:
            candidates = np.flatnonzero(true_mask(pc.starts_with(lines, self.prefix)))
            bodies = pc.utf8_slice_codeunits(lines.take(pa.array(candidates)), len(self.prefix))
        else:
            candidates = np.flatnonzero(~true_mask(pc.match_substring_regex(lines, PREFIX_RE)))
            bodies = lines.take(pa.array(candidates))
        # Python's `re` per line: a dump is a few hundred lines, and RE2 would compile this pattern's
        # Unicode classes (Python's \s, \d, \b) for each (12 ms)
        belongs = np.array([CONTINUATION.match(body) is not None for body in bodies.to_pylist()], dtype=bool)
        kept = bodies.filter(pa.array(belongs, pa.bool_()))
        at = candidates[belongs]
        depth = self.depth + np.cumsum(bracket_deltas(kept))
        seen = self.n_seen + at + 1
        closing = np.flatnonzero((depth <= 0) | (seen > MAX_CONFIG_LINES))
        if len(closing):
            last = closing[0]
            at, offered, self.done = at[: last + 1], int(at[last]) + 1, True
            kept = kept.slice(0, last + 1)
            self.depth = int(depth[last])
        else:
            offered = m
            self.depth = int(depth[-1]) if len(depth) else self.depth
        self.n_seen += offered
        if len(at):
            self.parts.append(kept)
        return at, offered

    def parse(self) -> tuple[dict | None, str | None]:
        """The config dict, or None and why not."""
        if self.depth > 0:
            n_lines = sum(len(part) for part in self.parts)
            return None, f"config pprint not closed after {n_lines} lines (log truncated?)"
        bodies = [body for part in self.parts for body in part.to_pylist()]
        text = BARE_FLOATS.sub(
            lambda m: "None" if m.group(1) == "nan" else m.group(1)[:-3] + "1e999", "\n".join(bodies)
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
# values in a parsed config as its JSON writes them out: YAML aliases let a few hundred bytes name 10^8 of them
MAX_CONFIG_VALUES = 1_000_000
INT64_RANGE = (-(2**63), 2**63 - 1)


def expanded_size(value: Any, limit: int) -> int:
    """How many values (containers and scalars) `value` holds written out, a container reached twice (a YAML
    alias) counted each time; counting stops past `limit`, and a container that holds itself counts as more."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(v: Any) -> int:
        if not isinstance(v, dict | list | tuple):
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in open_:
            return limit + 1
        open_.add(key)
        total = 1
        for child in v.values() if isinstance(v, dict) else v:
            total += size(child)
            if total > limit:
                break
        open_.discard(key)
        sizes[key] = total
        return total

    try:
        return size(value)
    except RecursionError:
        return limit + 1


def wandb_config(data: bytes, name: str, problems: list[str]) -> dict | None:
    """The run config in a W&B `config.yaml` (each top-level key holds `{desc, value}`), or None."""
    import yaml

    if len(data) >= WANDB_CONFIG_MAX_BYTES:
        problems.append(f"{name}: larger than {WANDB_CONFIG_MAX_BYTES >> 20} MB: not read as the config")
        return None
    try:
        doc = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's is 10x faster
    except yaml.YAMLError as exc:
        problems.append(f"{name}: W&B config could not be parsed ({type(exc).__name__})")
        return None
    if not isinstance(doc, dict):
        return None
    if expanded_size(doc, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
        problems.append(f"{name}: W&B config holds more than {MAX_CONFIG_VALUES:,} values written out "
                        "(YAML aliases repeating a value?): not read as the config")
        return None
    return {k: v.get("value") if isinstance(v, dict) and "value" in v else v
            for k, v in doc.items() if not str(k).startswith("_")}


def _number(v: Any, whole: bool) -> int | float | None:
    """`v` as a float, or as a whole number in int64's range (`whole`); None for anything else (text, bool,
    inf or NaN as a whole number, a number out of range)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if not whole:
        try:
            return float(v)
        except OverflowError:
            return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    n = int(v)
    return n if INT64_RANGE[0] <= n <= INT64_RANGE[1] else None


def config_facts(cfg: dict | None, total_steps_line: int | None, problems: list[str] | None = None) -> dict[str, Any]:
    """The `runs` config columns from a resolved config and the `Total training steps: N` line.

    A number the column cannot hold (inf as a count, 10^20, 1e300) becomes null, with a problem in `problems`;
    `config_json` holds the config with its credentials masked.
    """
    problems = [] if problems is None else problems

    def number(v: Any, whole: bool, where: str) -> int | float | None:
        n = _number(v, whole)
        if n is None and isinstance(v, int | float) and not isinstance(v, bool):
            problems.append(f"config {where} = {str(v)[:40]} is out of range: kept as null")
        return n

    facts: dict[str, Any] = {k: None for k in CONFIG_FIELDS}
    if cfg is not None:
        for col, path in CONFIG_FIELDS.items():
            v = _get(cfg, path)
            if col in STRING_FIELDS:
                facts[col] = None if v is None else mask_secrets(str(v))
            else:
                facts[col] = number(v, col not in FLOAT_FIELDS, ".".join(path))
    # verl writes the total it computed into the optimizer's config before logging the config to W&B
    optim_total = _get(cfg or {}, ("actor_rollout_ref", "actor", "optim", "total_training_steps"))
    if facts["total_training_steps"] is None and isinstance(optim_total, int) and optim_total > 0:
        facts["total_training_steps"] = number(optim_total, True, "actor_rollout_ref.actor.optim.total_training_steps")
    if total_steps_line is not None:
        facts["total_training_steps"] = number(total_steps_line, True, "'Total training steps' line")
    facts["config_json"] = None if cfg is None else json.dumps(mask_config(cfg), default=str, sort_keys=True)
    return facts
