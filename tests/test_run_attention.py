"""run_attention: each run's verdict (failed, hung, anomalous, slower), decided once in SQL for the fleet page
and the mails, from hand-made run_summary, step_anomalies and run_baselines rows."""

import pyarrow as pa

from pipeline import derive, lake

# run_id: (failure_class, training_outcome, anomalous step classes, run_baselines figures)
RUNS = {
    "oom": ("cuda_oom", None, [], {}),
    "hung": ("hang", None, [], {}),
    "stopped": ("interrupted", None, [], {}),
    "cut": ("no_outcome", None, [], {}),
    "collapsed": ("no_outcome", "collapsed", [], {}),
    "spiky": ("completed", None, ["kl_spike", "kl_spike", "grad_explosion"], {}),
    "slower": ("completed", None, [], {"group_prior_runs": 2, "group_step_ratio": 1.3, "group_median_step_s": 10.0}),
    "slower-once": ("completed", None, [], {"group_prior_runs": 1, "group_step_ratio": 2.0}),
    "barely-slower": ("completed", None, [], {"exp_prior_runs": 5, "exp_step_ratio": 1.2}),
    "fewer-tokens": ("completed", None, [], {"setup_prior_runs": 3, "setup_slowdown_ratio": 1.5, "throughput": 600.0,
                                             "setup_throughput": 900.0}),
    "nan-ratio": ("completed", None, [], {"group_prior_runs": 4, "group_step_ratio": float("nan")}),
    "fine": ("completed", None, [], {}),
}
BASELINE_COLUMNS = ("group_prior_runs", "group_step_ratio", "group_median_step_s", "exp_prior_runs", "exp_step_ratio",
                    "exp_median_step_s", "setup_prior_runs", "setup_slowdown_ratio", "throughput", "setup_throughput")


def _warehouse(wh):
    for rid, (cls, outcome, classes, _) in RUNS.items():
        lake.write_run_table(wh, "run_summary", rid, pa.table({
            "failure_class": [cls], "training_outcome": pa.array([outcome], pa.string()), "last_step": [60],
            "expected_steps": [100], "root_cause_text": pa.array([None], pa.string())}))
        lake.write_run_table(wh, "step_anomalies", rid, pa.table({
            "step": list(range(len(classes) + 1)), "is_anomaly": [False] + [True] * len(classes),
            "anomaly_class": pa.array([None, *classes], pa.string()),
            # the first two flagged steps one episode, the third another
            "episode_id": pa.array([None, *[1 + i // 2 for i in range(len(classes))]], pa.int64())}))
    lake.write_fleet_table(wh, "run_baselines", pa.table(
        {"run_id": list(RUNS), **{c: pa.array([RUNS[r][3].get(c) for r in RUNS],
                                              pa.int64() if c.endswith("_prior_runs") else pa.float64())
                                  for c in BASELINE_COLUMNS}}))
    derive.derive_fleet_table(wh, "run_attention")


def test_each_run_gets_one_verdict(tmp_path):
    """Failed endings and collapsed training first (0), then hangs (1), then anomalous runs and runs over 1.25x
    slower than at least two earlier runs (2); a run stopped on purpose, one whose log just ends and a healthy
    one need none (3). A hang is a failure; an interrupted run and a log that just ends are not."""
    _warehouse(tmp_path)
    with lake.reader(tmp_path, only=("run_attention",)) as con:
        got = {r[0]: r[1:] for r in con.execute(
            "select run_id, attention, needs_attention, failed, regression, episodes, anomalous_steps, top_anomaly, "
            "anomaly_classes from run_attention").fetchall()}
    assert {rid: v[:4] for rid, v in got.items()} == {
        "oom": (0, True, True, None),
        "hung": (1, True, True, None),
        "stopped": (3, False, False, None),
        "cut": (3, False, False, None),
        "collapsed": (0, True, False, None),
        "spiky": (2, True, False, None),
        "slower": (2, True, False, "group"),
        "slower-once": (3, False, False, None),
        "barely-slower": (3, False, False, None),
        "fewer-tokens": (2, True, False, "setup"),
        "nan-ratio": (3, False, False, None),
        "fine": (3, False, False, None),
    }
    assert got["spiky"][4:] == (2, 3, "kl_spike", ["grad_explosion", "kl_spike"])
    assert got["fine"][4:] == (0, 0, None, [])


def test_fleet_page_and_alerts_read_the_verdict(tmp_path):
    """The fleet report's runs and the alert mail's runs are run_attention's: the same runs need attention."""
    from datetime import date

    from pipeline.alerts import runs_needing_attention
    from pipeline.report.fleet_data import load_fleet

    _warehouse(tmp_path)
    runs = {r.run_id: r for r in load_fleet(tmp_path, date(2026, 12, 1)).runs}
    page = {rid: r.attention for rid, r in runs.items()}
    mailed = {r["run_id"] for r in runs_needing_attention(tmp_path, list(RUNS))}
    assert mailed == {"oom", "hung", "collapsed", "spiky", "slower", "fewer-tokens"}
    assert {rid for rid, a in page.items() if a < 3} == mailed
    assert runs["slower"].regression == "step time ×1.30 vs 10.0 s over 2 earlier runs of its config group"
    assert runs["fewer-tokens"].regression.startswith("600 tokens/s per GPU, ×0.67 of the 900 of 3 earlier runs")
