"""Threshold rules from the seed articles, read from pipeline/knowledge/rules.toml and applied to features."""

from __future__ import annotations

import operator
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

KNOWLEDGE_DIR = Path(__file__).resolve().parent.parent / "knowledge"
RULES_FILE = KNOWLEDGE_DIR / "rules.toml"

OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
MAX_STRENGTH = 50.0


@dataclass(frozen=True)
class Rule:
    """One rule: all conditions must hold; `mode` is "flag" (flags alone) or "attribute" (names the class)."""

    name: str
    anomaly_class: str
    when: tuple[tuple[str, str, float], ...]
    mode: str
    weight: float
    seed: bool
    source: str
    detector: bool = True


def load_rules(path: str | Path | None = None, seed_only: bool = False) -> tuple[Rule, ...]:
    """The detector's rules from the TOML file (the packaged one by default), validated.

    `seed_only` gives instead every literal seed-article threshold (the "seed thresholds" baseline).
    """
    rules = _load_rules(str(path or RULES_FILE))
    if seed_only:
        return tuple(r for r in rules if r.seed)
    return tuple(r for r in rules if r.detector)


@cache
def _load_rules(path: str) -> tuple[Rule, ...]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    rules = []
    for raw in data["rule"]:
        when = tuple((str(f), str(op), float(v)) for f, op, v in raw["when"])
        for _, op, _ in when:
            if op not in OPS:
                raise ValueError(f"rule {raw['name']}: unknown operator {op!r}")
        if raw["mode"] not in ("flag", "attribute"):
            raise ValueError(f"rule {raw['name']}: mode must be 'flag' or 'attribute'")
        rules.append(
            Rule(raw["name"], raw["class"], when, raw["mode"], float(raw.get("weight", 1.0)),
                 bool(raw.get("seed", False)), raw.get("source", ""), bool(raw.get("detector", True)))
        )
    return tuple(rules)


def _condition_strength(x: np.ndarray, op: str, value: float) -> np.ndarray:
    """How far past the threshold x is, as a ratio (>= 1 when the condition holds)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if op in (">", ">=") and value > 0 or op in ("<", "<=") and value < 0:
            s = x / value
        elif op in ("<", "<=") and value > 0:
            s = value / np.where(x > 0, x, np.nan)
            s = np.where(x <= 0, MAX_STRENGTH, s)
        else:
            s = np.ones_like(x)
    return np.clip(np.nan_to_num(s, nan=0.0, posinf=MAX_STRENGTH), 0.0, MAX_STRENGTH)


def apply_rules(features: pd.DataFrame, rules: tuple[Rule, ...] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per rule, whether it fires on each step and its strength (first condition's excess ratio, 0 if not fired)."""
    rules = rules or load_rules()
    hits, strength = {}, {}
    n = len(features)
    for rule in rules:
        fired = np.ones(n, dtype=bool)
        for feature, op, value in rule.when:
            x = features[feature].to_numpy(dtype=float) if feature in features else np.full(n, np.nan)
            with np.errstate(invalid="ignore"):
                fired &= OPS[op](x, value) & ~np.isnan(x)
        f0, op0, v0 = rule.when[0]
        x0 = features[f0].to_numpy(dtype=float) if f0 in features else np.full(n, np.nan)
        hits[rule.name] = fired
        strength[rule.name] = np.where(fired, _condition_strength(x0, op0, v0), 0.0)
    return pd.DataFrame(hits, index=features.index), pd.DataFrame(strength, index=features.index)
