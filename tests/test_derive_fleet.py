"""Derive tables on a simulated fleet, checked against the simulator's labels and its logged numbers."""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

import pytest

from pipeline import derive
from pipeline.lake import connect


@pytest.fixture(scope="module")
def derived(sim_fleet, tmp_path_factory) -> SimpleNamespace:
    """The session's simulated fleet ingested and derived (no detect/report layers)."""
    from pipeline.ingest import discover_runs, ingest_run

    wh = tmp_path_factory.mktemp("derive_fleet") / "warehouse"
    found = discover_runs(sim_fleet.archive, quiet_period_s=0, now=time.time() + 10**7)
    for entry in found.entries:
        ingest_run(entry, wh)
    run_ids = [e.run_id for e in found.entries]
    derive.derive_run_tables(wh, run_ids)
    derive.derive_fleet_tables(wh)
    con = connect(wh)
    cur = con.execute("select * from run_summary")
    cols = [d[0] for d in cur.description]
    summary = {d["run_id"]: d for d in (dict(zip(cols, r, strict=True)) for r in cur.fetchall())}
    return SimpleNamespace(warehouse=wh, con=con, labels=sim_fleet.labels["runs"], summary=summary)


def _confusion(labels: dict, summary: dict) -> tuple[Counter, str]:
    pairs = Counter((lab["failure_class"], summary.get(rid, {}).get("failure_class", "<missing>"))
                    for rid, lab in labels.items())
    classes = sorted({c for pair in pairs for c in pair})
    lines = ["label \\ predicted".ljust(19) + "".join(c[:9].rjust(10) for c in classes)]
    lines += [a.ljust(19) + "".join(str(pairs.get((a, b), 0)).rjust(10) for b in classes) for a in classes]
    return pairs, "\n".join(lines)


def test_failure_class_and_last_step_match_labels(derived):
    pairs, table = _confusion(derived.labels, derived.summary)
    print("\n" + table)
    n = len(derived.labels)
    right = sum(v for (a, b), v in pairs.items() if a == b)
    assert right / n >= 0.98, table
    last_ok = sum(derived.summary[r]["last_step"] == lab["last_step"] for r, lab in derived.labels.items())
    assert last_ok / n >= 0.98
    assert all(derived.summary[r]["expected_steps"] == lab["expected_steps"] for r, lab in derived.labels.items())


def test_root_cause_line_is_the_labelled_one(derived):
    misses = []
    for rid, lab in derived.labels.items():
        if lab["failure_class"] in ("completed", "hang") or lab.get("root_cause_line_no") is None:
            continue
        got = derived.summary[rid]
        if not (got["root_cause_line_no"] == lab["root_cause_line_no"]
                and got["root_cause_file"] == lab["root_cause_file"]
                and lab["first_error_line_contains"] in got["root_cause_text"]):
            misses.append((rid, lab["root_cause_line_no"], lab["first_error_line_contains"],
                           got["root_cause_line_no"], got["root_cause_text"]))
    assert not misses, misses


def test_hangs_name_the_phase_and_last_activity(derived):
    hangs = {r: lab for r, lab in derived.labels.items() if lab["failure_class"] == "hang"}
    assert hangs
    for rid, lab in hangs.items():
        got = derived.summary[rid]
        assert got["failure_phase"] == lab["failure_phase"], rid
        assert got["root_cause_line_no"] == lab["root_cause_line_no"], rid


def test_phase_columns_equal_logged_timers(derived):
    mismatched = derived.con.execute(
        """
        select count(*)
        from step_phases as p
        join step_metrics as m
          on m.run_id = p.run_id and m.step = p.step
         and m.key in ('timing_s/gen', 'timing_s/update_actor', 'timing_s/old_log_prob', 'timing_s/step',
                       'timing_s/testing', 'timing_s/save_checkpoint')
        where m.value is distinct from case m.key
            when 'timing_s/gen' then p.gen
            when 'timing_s/update_actor' then p.update_actor
            when 'timing_s/old_log_prob' then p.old_log_prob
            when 'timing_s/testing' then p.testing
            when 'timing_s/save_checkpoint' then p.save_checkpoint
            else p.step_time end
        """
    ).fetchone()[0]
    assert mismatched == 0
    n_timed = derived.con.execute(
        "select count(distinct (run_id, step)) from step_metrics where key = 'timing_s/step'").fetchone()[0]
    assert derived.con.execute("select count(*) from step_phases where step_time is not null").fetchone()[0] == n_timed


def test_shares_sum_to_one(derived):
    worst = derived.con.execute(
        """
        select max(abs(coalesce(share_gen, 0) + coalesce(share_reward, 0) + coalesce(share_old_log_prob, 0)
                   + coalesce(share_ref, 0) + coalesce(share_values, 0) + coalesce(share_adv, 0)
                   + coalesce(share_update_critic, 0) + coalesce(share_update_actor, 0)
                   + coalesce(share_update_weights, 0) + coalesce(share_other, 0) - 1))
        from step_phases where step_time > 0
        """
    ).fetchone()[0]
    assert worst < 1e-9


def test_fleet_tables_count_every_run(derived):
    con = derived.con
    n = len(derived.labels)
    assert con.execute("select sum(runs) from fleet_daily").fetchone()[0] == n
    assert con.execute("select sum(runs) from fleet_weekly").fetchone()[0] == n
    assert con.execute("select sum(runs) from fleet_config_groups").fetchone()[0] == n
    assert con.execute("select count(*) from run_baselines").fetchone()[0] == n
    by_class = dict(con.execute("select failure_class, count(*) from run_summary group by all").fetchall())
    assert con.execute("select sum(hang), sum(cuda_oom) from fleet_daily").fetchone() == (
        by_class.get("hang", 0), by_class.get("cuda_oom", 0))


def test_wall_time_covers_the_time_spent_in_steps(derived):
    rows = derived.con.execute(
        """
        select s.run_id, s.wall_time_s, sum(p.step_time) as in_steps
        from run_summary s join step_phases p using (run_id)
        group by all
        """
    ).fetchall()
    assert rows
    for run_id, wall, in_steps in rows:
        assert wall >= in_steps * 0.999, (run_id, wall, in_steps)


# verl's timer keys and the step_phases columns the design card names for them: the test's own reading of the contract
TIMERS = {
    "timing_s/gen": "gen", "timing_s/reward": "reward", "timing_s/old_log_prob": "old_log_prob",
    "timing_s/ref": "ref", "timing_s/values": "values", "timing_s/adv": "adv",
    "timing_s/update_critic": "update_critic", "timing_s/update_actor": "update_actor",
    "timing_s/update_weights": "update_weights", "timing_s/testing": "testing",
    "timing_s/save_checkpoint": "save_checkpoint", "timing_s/step": "step_time",
}


def _simulated_timers(traces):
    """Per run and step (its last print after a resume), the timers the simulator drew, straight from its traces."""
    import numpy as np
    import pandas as pd

    parts = []
    for tr in traces:
        last = {int(s): i for i, s in enumerate(tr.step)}
        steps = np.array(sorted(last), dtype=np.int64)
        pos = np.array([last[s] for s in steps], dtype=np.int64)
        frame = pd.DataFrame({"run_id": tr.spec.run_id, "step": steps}
                             | {col: tr.values[key][pos] for key, col in TIMERS.items() if key in tr.values})
        if "testing" in frame:
            frame.loc[~tr.is_test[pos], "testing"] = np.nan
        if "save_checkpoint" in frame:
            frame.loc[~tr.is_save[pos], "save_checkpoint"] = np.nan
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


def test_phase_columns_equal_the_simulators_own_timers(derived, sim_fleet):
    """Every verl timer column against the numbers the simulator drew (not read back from the lake)."""
    import numpy as np

    from lab.evaluate import simulated_traces

    sim = _simulated_timers(simulated_traces(sim_fleet.labels["seed"], len(sim_fleet.labels["runs"])))
    # a run that logs only to W&B prints no step lines: its timers are not in the console log
    printed = {rid for rid, lab in sim_fleet.labels["runs"].items() if lab.get("step_lines", True)}
    sim = sim[sim["run_id"].isin(printed)]
    got = derived.con.execute("select * from step_phases").df()
    both = sim.merge(got, on=["run_id", "step"], suffixes=("_sim", ""))
    assert len(both) == len(sim) == len(got)
    compared = [c for c in TIMERS.values() if f"{c}_sim" in both]
    # the simulator writes every timer but update_weights (HEAD-only verl); test_derive covers that one
    assert len(compared) == 11, compared
    for col in compared:
        want, have = both[f"{col}_sim"].to_numpy(float), both[col].to_numpy(float)
        # the v0.4 console format prints 3 decimals; the newer ones print the full repr
        v04 = both["run_id"].map(lambda r: sim_fleet.labels["runs"][r]["format"] == "v04").to_numpy()
        tol = np.where(v04, 5e-4 + 1e-9, 1e-12 * np.abs(want))
        ok = (np.isnan(want) & np.isnan(have)) | (np.abs(want - have) <= tol)
        assert ok.all(), (col, both.loc[~ok, ["run_id", "step", f"{col}_sim", col]].head())
    shares = both[both.step_time > 0]
    for col in ("gen", "old_log_prob", "update_actor"):
        assert np.allclose(shares[f"share_{col}"], shares[col] / shares["step_time"], equal_nan=True)
