"""verl's own throughput, efficiency and PPO signals, and per-source validation, for a run and the earlier
runs of its config group (run_baselines names the group; the values come from the per-step tables)."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

import duckdb

from pipeline.report.warehouse import by_run, clean, columns, firsts, rows
from pipeline.tables import in_last_launch

# (table, column or verl key, label, verl's name, higher is better): step_health keeps every verl key in a map
SIGNALS = (
    ("step_phases", "throughput", "Tokens per second per GPU", "perf/throughput", True),
    ("step_phases", "mfu_actor", "Actor model FLOPs utilisation", "perf/mfu/actor", True),
    ("step_phases", "mfu_critic", "Critic model FLOPs utilisation", "perf/mfu/critic", True),
    ("step_phases", "tpt_gen", "Generation, ms per response token", "timing_per_token_ms/gen", False),
    ("step_phases", "tpt_ref", "Reference log-probs, ms per token", "timing_per_token_ms/ref", False),
    ("step_phases", "tpt_values", "Critic values, ms per token", "timing_per_token_ms/values", False),
    ("step_phases", "tpt_adv", "Advantages, ms per token", "timing_per_token_ms/adv", False),
    ("step_phases", "tpt_update_critic", "Critic update, ms per token", "timing_per_token_ms/update_critic", False),
    ("step_phases", "tpt_update_actor", "Actor update, ms per token", "timing_per_token_ms/update_actor", False),
    ("step_health", "pg_clipfrac", "Share of tokens clipped by PPO", "actor/pg_clipfrac", None),
    ("step_health", "critic/vf_explained_var", "Variance of returns the critic explains", "critic/vf_explained_var",
     True),
)
# the per-step tables a run's signals and validation are read from, for it and its earlier peers
TABLES = ("step_phases", "step_health", "step_metrics", "run_launches")
VAL_CORE_RE = re.compile(r"^val-core/(?P<source>.+)/(?P<metric>[^/]+)/(?P<stat>mean@\d+)$")
MAX_EARLIER = 10


@dataclass
class Signal:
    """One verl signal: this run's median over its steps, and the median of earlier runs of its group."""

    label: str
    key: str
    value: float
    group: float | None
    group_runs: int
    better_up: bool | None

    @property
    def ratio(self) -> float | None:
        """This run's value over the group's, when both are there."""
        return self.value / self.group if self.group else None


@dataclass
class Validation:
    """A validation metric of one data source: first, last and best value of this run, and the group's last."""

    source: str
    metric: str
    first: float | None
    last: float | None
    best: float | None
    group_last: float | None
    group_runs: int


@dataclass
class Peers:
    """The earlier runs a run's signals are compared with: of its config group, else of its model setup."""

    scope: str
    name: str | None
    run_ids: list[str]


# run_baselines' grouping columns, closest first: the same work per step, then the same model and engine
SCOPES = (("config_group", "config group"), ("model_setup", "model setup"))


def earlier_peers(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, Peers]:
    """Per run, the runs of its config group that ended before it, newest first (from run_baselines); when
    there are none, those of its model setup, whose per-GPU and per-token figures still compare."""
    have = set(columns(con, "run_baselines"))
    found: dict[str, Peers] = {}
    for column, scope in SCOPES:
        left = [r for r in run_ids if r not in found]
        if column not in have or not left:
            continue
        earlier = rows(con, f"select me.run_id as me, b.run_id, me.{column} as name from run_baselines b "
                            f"join run_baselines me on list_contains($ids, me.run_id) and b.{column} = me.{column} "
                            "and b.run_id <> me.run_id and (b.ended_at < me.ended_at or me.ended_at is null) "
                            "qualify row_number() over (partition by me.run_id "
                            "order by b.ended_at desc nulls last, b.run_id desc) <= $n "
                            "order by me.run_id, b.ended_at desc nulls last, b.run_id desc",
                       {"ids": left, "n": MAX_EARLIER})
        for rid, group in by_run(earlier, "me").items():
            found[rid] = Peers(scope, group[0]["name"], [r["run_id"] for r in group])
    left = [r for r in run_ids if r not in found]
    groups = firsts(con, "run_baselines", left) if left and "config_group" in have else {}
    return {rid: found.get(rid) or Peers(SCOPES[0][1], groups.get(rid, {}).get("config_group"), [])
            for rid in run_ids}


def _medians(con: duckdb.DuckDBPyConnection, table: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per run, the median over its steps of each signal `table` holds."""
    have = set(columns(con, table))
    picks, params = [], {"ids": run_ids}
    for t, col, *_ in SIGNALS:
        if t == table and col in have:
            picks.append(f'median("{col}") as "{col}"')
        elif t == table and "/" in col and "verl_values" in have:
            name = f"key_{len(params)}"
            params[name] = col
            picks.append(f'median(verl_values[${name}]) as "{col}"')
    if not picks:
        return {}
    found = rows(con, f"select run_id, {', '.join(picks)} from {table} "
                      "where list_contains($ids, run_id) group by run_id", params)
    return {r.pop("run_id"): r for r in found}


def compared_runs(peers: dict[str, Peers]) -> list[str]:
    """The runs whose signals a batch's reports read: its own, then their earlier peers."""
    return list(dict.fromkeys([*peers, *(p for of in peers.values() for p in of.run_ids)]))


def load_signals(con: duckdb.DuckDBPyConnection, peers: dict[str, Peers]) -> dict[str, list[Signal]]:
    """Per run, the verl signals its log has, each against the earlier runs of its config group (`peers`)."""
    per_run = {t: _medians(con, t, compared_runs(peers)) for t in ("step_phases", "step_health")}
    return {rid: _signals(per_run, rid, of.run_ids) for rid, of in peers.items()}


def _signals(per_run: dict[str, dict[str, dict[str, Any]]], run_id: str, earlier: list[str]) -> list[Signal]:
    out = []
    for table, col, label, key, better_up in SIGNALS:
        mine = clean(per_run[table].get(run_id, {}).get(col))
        if mine is None:
            continue
        theirs = [v for r in earlier if (v := clean(per_run[table].get(r, {}).get(col))) is not None]
        out.append(Signal(label, key, float(mine), statistics.median(theirs) if theirs else None, len(theirs),
                          better_up))
    return out


def load_validation(con: duckdb.DuckDBPyConnection, peers: dict[str, Peers]) -> dict[str, list[Validation]]:
    """Per run, validation per data source (verl's val-core/<source>/<metric>/mean@n) against its group's."""
    if not columns(con, "step_metrics"):
        return {}
    # each log's last launch (run_launches, where the warehouse has it): an earlier run in the same log is not it
    launch = (f"left join run_launches as la using (run_id) where {in_last_launch('m')} and"
              if columns(con, "run_launches") else "where")
    found = by_run(rows(con, "select run_id, key, arg_min(value, step) as first, arg_max(value, step) as last, "
                             f"max(value) as best from step_metrics as m {launch} list_contains($ids, run_id) "
                             "and key like 'val-core/%' and isfinite(value) group by all order by key, run_id",
                        {"ids": compared_runs(peers)}), drop=False)
    return {rid: _validation(found, rid, of.run_ids) for rid, of in peers.items()}


def _validation(found: dict[str, list[dict[str, Any]]], run_id: str, earlier: list[str]) -> list[Validation]:
    out = []
    for r in found.get(run_id, []):
        m = VAL_CORE_RE.match(r["key"])
        if not m:
            continue
        theirs = [o["last"] for e in earlier for o in found.get(e, []) if o["key"] == r["key"]]
        out.append(Validation(m["source"], f"{m['metric']} ({m['stat']})", r["first"], r["last"], r["best"],
                              statistics.median(theirs) if theirs else None, len(theirs)))
    return out
