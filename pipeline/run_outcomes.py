"""How analysed runs ended, read from their `run_summary` rows: counts for the command line, one run's verdict."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline.lake import connect, fleet_input_source, reader


def _summaries(warehouse: str | Path, run_ids: list[str]) -> list[dict]:
    """The run_summary rows of `run_ids`, each with its number of anomaly episodes."""
    if not run_ids:
        return []
    con = connect(warehouse, run_ids=run_ids)
    try:
        views = {v for (v,) in con.execute("select view_name from duckdb_views()").fetchall()}
        episodes = ("select run_id, count(distinct episode_id) as n_episodes from step_anomalies "
                    "where is_anomaly group by all" if "step_anomalies" in views
                    else "select null::varchar as run_id, 0 as n_episodes where false")
        cur = con.execute(f"select s.*, coalesce(e.n_episodes, 0) as n_episodes from run_summary as s "
                          f"left join ({episodes}) as e using (run_id) where s.run_id in (select unnest($r))",
                          {"r": run_ids})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def outcome_counts(warehouse: str | Path, run_ids: list[str]) -> dict[str, int]:
    """How the runs ended, in the words of their reports, most frequent first: {'CUDA OOM': 2, ...}."""
    from pipeline.report.labels import outcome_label

    # two columns of the one-file copy of every run's row (fleet_input_source, brought up to date with the
    # partitions): every column of 2,000 partitions, with the episodes, took 9 s and 760 MB, the partitions 550 MB
    src = fleet_input_source(warehouse, "run_summary") if run_ids else None
    if src is None:
        return {}
    with reader(warehouse, only=()) as con:
        rows = con.execute(f"select failure_class, failure_detail from {src} where run_id in (select unnest($r))",
                           {"r": run_ids}).fetchall()
    return dict(Counter(outcome_label(cls, detail) for cls, detail in rows).most_common())


def verdict(warehouse: str | Path, run_id: str) -> str:
    """How an analysed run ended, in the words of its report's banner: 'CUDA OOM in old_log_prob at step 0'."""
    from pipeline.report.verdict import verdict as banner

    found = _summaries(warehouse, [run_id])
    if not found:
        return "no summary"
    return banner(found[0], found[0]["n_episodes"])["sentence"].rstrip(".")
