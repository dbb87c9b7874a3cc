"""Reports of a simulated fleet analysed end to end: what they show agrees with the warehouse tables."""

from __future__ import annotations

import pytest
from report_fixtures import parse_html

from pipeline import lake

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tables(analyzed_fleet):
    con = lake.connect(analyzed_fleet.warehouse)
    summary = {r[0]: r[1:] for r in con.execute(
        "select run_id, failure_class, root_cause_file, root_cause_line_no from run_summary").fetchall()}
    episodes = {}
    for run_id, first, cls in con.execute(
        "select run_id, min(step), mode(anomaly_class) from step_anomalies where is_anomaly "
        "group by run_id, episode_id order by run_id, min(step)"
    ).fetchall():
        episodes.setdefault(run_id, []).append((first, cls))
    con.close()
    return summary, episodes


def test_every_run_has_a_report_that_matches_its_summary(analyzed_fleet, tables):
    summary, episodes = tables
    assert set(summary) == set(analyzed_fleet.labels["runs"])
    for run_id, (cls, cause_file, cause_line) in summary.items():
        doc = parse_html((analyzed_fleet.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        assert doc.find("section", id_="verdict").attrs["data-failure-class"] == cls, run_id
        if cause_line is not None:
            assert doc.find(id_="root-cause-location").text() == f"{cause_file}:{cause_line}"
            cause = doc.find("pre", id_="root-cause-context").find("span", cls="cause")
            assert cause.attrs["data-line"] == str(cause_line)
        rows = doc.find_all("tr", cls="episode")
        got = [(int(r.attrs["data-first-step"]), r.attrs["data-class"]) for r in rows]
        assert [first for first, _ in got] == [first for first, _ in episodes.get(run_id, [])], run_id
        if cls != "completed":
            assert doc.find(id_="failure-advice").find_all("li") or doc.find(id_="failure-advice").find_all("td")


def test_fleet_report_links_every_run(analyzed_fleet, tables):
    summary, _ = tables
    fleet = analyzed_fleet.outcome.fleet_report
    doc = parse_html(fleet.read_text(encoding="utf-8"))
    linked = {a.attrs["href"] for a in doc.find("table", id_="all-runs-table").find_all("a")}
    assert linked == {f"../runs/{run_id}.html" for run_id in summary}
    for href in linked:
        assert (fleet.parent / href).resolve().is_file()


# Episodes the detector misses on the session's fleet, each kept here until it is found (then the test fails
# and the entry goes): a reward collapse at steps 7-16 of a 22-step run, back to the level the run started
# at (0.09 at step 1, 0.23 at step 6, 0.08-0.15 in the episode, 0.29-0.43 after), so against the run's own
# median it is no fall at all; a rule on the fall from the previous steps alone would flag every ramp-up.
KNOWN_MISSES = {("countdown-grpo-llama3.2-3b-0013", "reward_collapse")}


def test_reports_agree_with_the_simulator_ground_truth(analyzed_fleet):
    """Every failure class of the vocabulary, as labels.json has it: verdict, causal line, episode marks."""
    from lab.simulate.vocab import FAILURE_CLASSES

    labels = analyzed_fleet.labels["runs"]
    assert {lab["failure_class"] for lab in labels.values()} == set(FAILURE_CLASSES)
    for run_id, lab in labels.items():
        doc = parse_html((analyzed_fleet.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        verdict = doc.find("section", id_="verdict")
        assert verdict.attrs["data-failure-class"] == lab["failure_class"], run_id
        sentence = verdict.find("p", cls="sentence").text()
        if lab["failure_class"] not in ("completed", "hang"):
            assert f"step {lab['last_step']}" in sentence, (run_id, sentence)
        if lab.get("first_error_line_contains"):
            cause = doc.find("pre", id_="root-cause-context").find("span", cls="cause")
            assert lab["first_error_line_contains"] in cause.text(), run_id
        marked = [(int(r.attrs["data-first-step"]), int(r.attrs["data-last-step"]), r.attrs["data-class"])
                  for r in doc.find_all("tr", cls="episode")]
        for ep in lab["episodes"]:
            found = any(first <= ep["last_step"] + 2 and last >= ep["first_step"] - 2 and cls == ep["class"]
                        for first, last, cls in marked)
            assert found != ((run_id, ep["class"]) in KNOWN_MISSES), (run_id, ep, marked)


def test_earlier_runs_are_those_of_the_experiment_that_ended_before(tmp_path):
    """The run report's earlier runs come from run_baselines: the experiment's runs that ended before this
    one, newest first, as the specs say (every_class_specs spreads exp-a's runs two days apart)."""
    from report_fixtures import build_warehouse, every_class_specs

    from pipeline.report.run_data import load_run

    specs = every_class_specs()
    warehouse = build_warehouse(tmp_path / "wh", specs)
    for this in specs:
        expected = sorted((s for s in specs if s.experiment == this.experiment and s.ended_at < this.ended_at),
                          key=lambda s: s.ended_at, reverse=True)[:10]
        got = load_run(warehouse, this.run_id).earlier_runs
        assert [(r["run_id"], r["ended_at"]) for r in got] == [(s.run_id, s.ended_at) for s in expected], this.run_id
