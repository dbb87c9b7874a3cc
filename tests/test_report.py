"""Run and fleet reports rendered from hand-made warehouses, checked by parsing the HTML."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from report_fixtures import (
    FAILURE_CLASSES,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    ROOT_CAUSES,
    RunSpec,
    build_warehouse,
    every_class_specs,
    parse_html,
    write_run,
)

from pipeline import derive, lake
from pipeline.report import render_fleet_report, render_run_report

DAY = date(2026, 11, 28)
HEADLINES = {
    "completed": "Healthy",
    "hang": "Hung",
    "cuda_oom": "CUDA OOM",
    "nccl_timeout": "NCCL timeout",
    "ray_actor_died": "Ray worker died",
    "host_oom_killed": "Worker killed for host memory",
    "nan_divergence": "NaN divergence",
    "python_exception": "Python exception",
    "vllm_engine_error": "Rollout engine error",
    "unknown": "Ended for an unknown reason",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every report rendered from a hand-made warehouse."""
    root = tmp_path_factory.mktemp("report")
    specs = every_class_specs()
    warehouse = build_warehouse(root / "warehouse", specs)
    reports = root / "reports"
    pages = {s.run_id: render_run_report(warehouse, s.run_id, reports) for s in specs}
    fleet = render_fleet_report(warehouse, reports, DAY)
    return {"warehouse": warehouse, "reports": reports, "specs": {s.run_id: s for s in specs}, "pages": pages,
            "fleet": fleet}


def page(path: Path):
    return parse_html(path.read_text(encoding="utf-8"))


def run_id_of(cls: str) -> str:
    return f"run-{cls.replace('_', '-')}"


def cause_line_no(spec: RunSpec) -> int:
    return 2 + spec.n_steps + 4


@pytest.mark.parametrize("cls", FAILURE_CLASSES)
def test_verdict_names_the_failure_class(built, cls):
    spec = built["specs"][run_id_of(cls)]
    doc = page(built["pages"][spec.run_id])
    banner = doc.find("section", id_="verdict")
    assert banner.attrs["data-failure-class"] == cls
    assert banner.find("p", cls="headline").text().strip() == HEADLINES[cls]
    assert doc.find(id_="last-step").text().split()[0] == str(spec.n_steps)
    sentence = banner.find("p", cls="sentence").text()
    if cls in ROOT_CAUSES and ROOT_CAUSES[cls][0]:
        assert f" in {ROOT_CAUSES[cls][0]} at step {spec.n_steps} after " in sentence
    assert doc.find("title").text().startswith(HEADLINES[cls])


def test_oom_sentence_reads_like_a_person(built):
    doc = page(built["pages"]["run-cuda-oom"])
    sentence = doc.find("section", id_="verdict").find("p", cls="sentence").text()
    assert re.fullmatch(r"CUDA OOM in update_actor at step \d+ after \d+ m \d+ s\.", sentence), sentence


def test_python_exception_names_the_exception(built):
    sentence = page(built["pages"]["run-python-exception"]).find("p", cls="sentence").text()
    assert sentence.startswith("KeyError in old_log_prob at step")


@pytest.mark.parametrize("cls", [c for c in ROOT_CAUSES])
def test_root_cause_line_with_file_line_and_context(built, cls):
    spec = built["specs"][run_id_of(cls)]
    doc = page(built["pages"][spec.run_id])
    line_no = cause_line_no(spec)
    assert doc.find(id_="root-cause-location").text() == f"train.log:{line_no}"
    ctx = doc.find("pre", id_="root-cause-context")
    lines = ctx.find_all("span", cls="ln")
    causes = [n for n in lines if "cause" in n.classes]
    assert len(causes) == 1 and causes[0].attrs["data-line"] == str(line_no)
    assert ROOT_CAUSES[cls][1] in causes[0].text()
    numbers = [int(n.attrs["data-line"]) for n in lines]
    assert numbers[0] < line_no < numbers[-1], "context before and after the causal line"
    assert "Traceback (most recent call last):" in ctx.text()


def test_completed_and_hung_runs_have_no_cause_line(built):
    completed = page(built["pages"]["run-completed"])
    assert not completed.find_all("pre", cls="log")
    assert "no terminal error" in completed.find("h2", id_="root-cause").parent.text()
    assert not completed.find_all(id_="failure-advice")
    hung = page(built["pages"]["run-hang"])
    assert not hung.find_all(id_="root-cause-context")
    assert "the run stalled (no progress for 47.0 min" in hung.find("h2", id_="root-cause").parent.text()
    assert "Hung for 47 m 0 s after step" in hung.find("section", id_="verdict").text()
    spec = built["specs"]["run-hang"]
    last = 2 + spec.n_steps
    assert hung.find(id_="last-line-location").text() == f"train.log:{last}"
    marked = hung.find("pre", id_="last-line-context").find("span", cls="cause")
    assert marked.attrs["data-line"] == str(last) and f"step:{spec.n_steps} - " in marked.text()


def test_anomaly_episodes_are_listed_with_explanation_and_advice(built):
    doc = page(built["pages"]["run-anomalous"])
    assert doc.find("section", id_="verdict").find("p", cls="headline").text() == "Completed with 2 anomaly episodes"
    rows = doc.find("table", id_="anomaly-table").find_all("tr", cls="episode")
    got = [(r.attrs["data-first-step"], r.attrs["data-last-step"], r.attrs["data-class"]) for r in rows]
    assert got == [("30", "36", "gen_slowdown"), ("80", "82", "kl_spike")]
    assert [r.find("span", cls="pill").text() for r in rows] == ["Slower generation", "KL spike"]
    assert [li.text() for li in rows[0].find_all("li")] == ["check Check gen_slowdown settings source"]
    assert "value far above the run median" in rows[1].text()


def test_run_charts_are_inline_svg(built):
    doc = page(built["pages"]["run-anomalous"])
    assert not doc.find_all("img")
    charts_ = doc.find_all("div", cls="vhc")
    assert {c.attrs["data-chart"] for c in charts_} == {"phases", "health"}
    for c in charts_:
        assert c.attrs["aria-label"] and c.find_all("svg")
    assert "2 anomaly episode(s)" in doc.find("div", data_chart="health").attrs["aria-label"]


def test_phase_table_marks_the_bottleneck(built):
    doc = page(built["pages"]["run-anomalous"])
    table = doc.find("table", id_="phase-table")
    assert table.find("tr", cls="bottleneck").find("td").text().startswith("gen")
    shares = [r.find_all("td")[-1].text() for r in table.find_all("tr") if r.find_all("td")]
    total = sum(float(s.rstrip(" %")) for s in shares if s.endswith("%"))
    assert total == pytest.approx(100, abs=1.0)
    assert doc.find("table", id_="earlier-runs").find_all("a")


def test_config_findings_and_completeness(built):
    doc = page(built["pages"]["run-cuda-oom"])
    findings = doc.find("table", id_="findings")
    assert findings.find("td", data_finding="low_gpu_memory_utilization").text() == "low gpu memory utilization"
    assert "train.log:2" in findings.text()
    kinds = {r.find_all("td")[0].text(): r.find_all("td")[1].text() for r in doc.find("table", id_="lines-by-kind")
             .find_all("tr") if r.find_all("td")}
    assert kinds["step metric lines"] == "50"
    assert doc.find("table", id_="sources").find("td", cls="mono").text() == "train.log"


def test_configuration_and_completeness_speak_plain_language(built):
    """No raw field name (snake_case) heads a row of the configuration or data-completeness tables."""
    doc = page(built["pages"]["run-cuda-oom"])
    heads = [th.text() for table in doc.find_all("table", cls="kv") for th in table.find_all("th")]
    assert "Responses per prompt (rollout n)" in heads and "Metric values that did not parse" in heads
    assert heads and not [h for h in heads if re.fullmatch(r"[a-z0-9_]+", h)]
    facts = {r.find("th").text(): r.find("td").text() for r in doc.find_all("tr") if r.find_all("th")
             and r.find_all("td")}
    assert facts["Share of metric values parsed"] == "99.9 %"  # the fixture's parse_completeness, 0.999


def _assert_no_active_content(doc):
    # the one script a report may carry is the fleet report's own runs-table sorter, none from the logs
    for script in doc.find_all("script"):
        assert script.attrs.get("class") == "interactive" and HOSTILE_SCRIPT not in script.text()
    for node in doc.iter():
        assert not any(k.startswith("on") for k in node.attrs), f"event handler on <{node.tag}>"
    for img in doc.find_all("img"):
        assert img.attrs["src"].startswith("data:image/png;base64,")


def test_hostile_log_text_is_shown_as_text(built):
    doc = page(built["pages"]["run-hostile"])
    _assert_no_active_content(doc)
    cause = doc.find("pre", id_="root-cause-context")
    assert HOSTILE_SCRIPT in cause.find("span", cls="cause").text()
    assert HOSTILE_IMG in cause.text()
    assert HOSTILE_IMG in doc.find("table", id_="anomaly-table").text()
    facts = {r.find("th").text(): r.find("td").text() for r in doc.find_all("tr") if r.find_all("th")
             and r.find_all("td")}
    assert facts["Experiment"] == "exp-b" + HOSTILE_IMG
    _assert_no_active_content(page(built["fleet"]))
    assert HOSTILE_IMG in page(built["fleet"]).find("tr", data_run_id="run-hostile").text()


def test_fleet_lists_runs_needing_attention_first(built):
    doc = page(built["fleet"])
    rows = doc.find("table", id_="attention-table").find_all("tr", cls="run")
    order = [int(r.attrs["data-attention"]) for r in rows]
    assert order == sorted(order)
    ids = [r.attrs["data-run-id"] for r in rows]
    assert ids == ["run-hostile", "run-cuda-oom", "run-nccl-timeout", "run-hang", "run-anomalous"], \
        "the last 7 days: failed newest first, then hung, then anomalous"
    assert doc.find("p", cls="headline").text() == "5 of the 6 runs of the week to 2026-11-28 need attention"


def test_an_old_archive_is_judged_by_its_newest_week_not_by_today(built, tmp_path):
    """Rendered on 2027-03-01, three months after its newest run ended (2026-11-28), the fleet is not
    "quiet this week": its windows end on the newest run's day, and the header says so."""
    doc = page(render_fleet_report(built["warehouse"], tmp_path, date(2027, 3, 1)))
    assert doc.find("p", cls="headline").text() == "5 of the 6 runs of the week to 2026-11-28 need attention"
    assert "the newest ended 2026-11-28" in doc.find("header").text()
    assert doc.find("h1").text() == "Fleet report · runs up to 2026-11-28" and "2027-03-01" not in doc.find("title").text()
    ids = [r.attrs["data-run-id"] for r in doc.find("table", id_="attention-table").find_all("tr", cls="run")]
    assert ids == ["run-hostile", "run-cuda-oom", "run-nccl-timeout", "run-hang", "run-anomalous"]


def test_fleet_counts_failures_by_class(built):
    doc = page(built["fleet"])
    counts = {r.attrs["data-class"]: int(r.find_all("td")[1].text()) for r in
              doc.find("table", id_="failure-counts").find_all("tr") if "data-class" in r.attrs}
    expected = {c: 1 for c in FAILURE_CLASSES}
    expected["completed"] = 2
    expected["python_exception"] = 2
    assert counts == expected


def test_fleet_links_stay_inside_the_reports_folder(built):
    reports = built["reports"].resolve()
    doc = page(built["fleet"])
    hrefs = [a.attrs["href"] for a in doc.find("table", id_="all-runs-table").find_all("a")]
    assert len(hrefs) == len(built["specs"])
    for href in hrefs:
        target = (built["fleet"].parent / href).resolve()
        assert target.is_relative_to(reports) and target.is_file(), href
    for a in page(built["pages"]["run-cuda-oom"]).find_all("a"):
        href = a.attrs["href"]
        if not href.startswith("#"):
            target = (built["pages"]["run-cuda-oom"].parent / href).resolve()
            assert target.is_relative_to(reports), href


def test_fleet_week_over_week_groups_and_latest(built):
    doc = page(built["fleet"])
    wow = {r.find_all("td")[0].text(): [td.text() for td in r.find_all("td")[1:]]
           for r in doc.find("table", id_="week-over-week").find_all("tr") if r.find_all("td")}
    assert wow["Runs ended"][:2] == ["6", "3"]
    assert doc.find("table", id_="config-groups").find_all("tr")[1].find_all("td")[1].text() == "12"
    assert {n.attrs["data-chart"] for n in doc.iter() if "data-chart" in n.attrs} == {"failures", "weekly", "shares"}
    latest = built["fleet"].parent / "latest.html"
    assert latest.read_text() == built["fleet"].read_text()
    assert built["fleet"].name == "2026-11-28.html"


def test_fleet_for_an_earlier_day_leaves_later_runs_out(built, tmp_path):
    path = render_fleet_report(built["warehouse"], tmp_path, date(2026, 11, 20))
    ids = {r.attrs["data-run-id"] for r in page(path).find("table", id_="all-runs-table").find_all("tr", cls="run")}
    assert ids == {"run-ray-actor-died", "run-host-oom-killed", "run-nan-divergence", "run-python-exception",
                   "run-vllm-engine-error", "run-unknown"}


def test_regression_against_earlier_runs_of_the_group(tmp_path):
    specs = [RunSpec(run_id=f"r{i}", n_steps=20, step_s=30, ended_at=datetime(2026, 11, 20 + i), seed=i)
             for i in range(3)]
    specs.append(RunSpec(run_id="slow", n_steps=20, step_s=60, ended_at=datetime(2026, 11, 27), seed=9))
    warehouse = build_warehouse(tmp_path / "wh", specs)
    doc = page(render_fleet_report(warehouse, tmp_path / "reports", DAY))
    rows = doc.find("table", id_="regression-table").find_all("tr")[1:]
    assert [r.find("a").text() for r in rows] == ["slow"]
    assert "×2" in rows[0].text()


def test_missing_tables_degrade_gracefully(tmp_path):
    wh = tmp_path / "wh"
    lake.write_run_table(wh, "run_summary", "bare-run", pa.table({
        "failure_class": ["hang"], "last_step": [7], "expected_steps": [10]}))
    doc = page(render_run_report(wh, "bare-run", tmp_path / "reports"))
    assert doc.find("p", cls="headline").text() == "Hung"
    assert not doc.find_all("img")
    fleet = page(render_fleet_report(wh, tmp_path / "reports", DAY))
    assert [r.attrs["data-run-id"] for r in fleet.find_all("tr", cls="run")][:1] == ["bare-run"]
    empty = page(render_fleet_report(tmp_path / "nothing", tmp_path / "r2", DAY))
    # an empty warehouse is no good news (an archive mount gone missing): said so, not green
    assert empty.find("p", cls="headline").text() == "No runs in the warehouse: nothing has been analysed"
    assert "ok" not in empty.find("section", id_="verdict").attrs["class"]


def test_unknown_or_bad_run_id_is_refused(built, tmp_path):
    with pytest.raises(ValueError):
        render_run_report(built["warehouse"], "../../etc/passwd", tmp_path)
    with pytest.raises(LookupError):
        render_run_report(built["warehouse"], "no-such-run", tmp_path)
    assert not (tmp_path / "runs").exists()


def test_advice_is_the_runs_own_rows(built, tmp_path):
    """The OOM run's "What to change" lists its run_advice rows on how it ended: a change with the run's value
    and a link to its source, and a check as no change; an episode's cell lists the rows of its episode."""
    rows = [
        {"episode_id": None, "rank": 1, "kind": "config", "setting": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
         "current_value": "8", "suggested_value": "4", "why": "the <b>update</b> ran out of memory",
         "source": "https://verl.readthedocs.io/en/latest/perf/perf_tuning.html"},
        {"episode_id": None, "rank": 2, "kind": "check", "setting": None, "current_value": None, "suggested_value": None,
         "why": "look at the other processes on the GPU", "source": "https://pytorch.org/docs/stable/notes/cuda.html"},
    ]
    warehouse = tmp_path / "wh"
    write_run(warehouse, RunSpec(run_id="oom", failure_class="cuda_oom", n_steps=5, ended_at=datetime(2026, 11, 20)))
    from report_fixtures import RUN_ADVICE_SCHEMA
    lake.write_run_table(warehouse, "run_advice", "oom", pa.Table.from_pylist(rows, schema=RUN_ADVICE_SCHEMA))
    doc = page(render_run_report(warehouse, "oom", tmp_path / "rep"))
    table = doc.find(id_="failure-advice").find("table", id_="run-advice")
    change, check = table.find_all("tr")[1:]
    assert [td.text() for td in change.find_all("td")][:4] == [
        "1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8", "4"]
    assert change.find("a").attrs["href"] == "https://verl.readthedocs.io/en/latest/perf/perf_tuning.html"
    assert not table.find_all("b")
    assert check.attrs["data-kind"] == "check" and "look at the other processes" in check.text()
    cell = page(built["pages"]["run-anomalous"]).find("tr", data_class="gen_slowdown").find("td", cls="advice-cell")
    assert "Check gen_slowdown settings" in cell.text()


def test_write_run_fixture_matches_the_contract(tmp_path):
    write_run(tmp_path, RunSpec(run_id="contract-run", n_steps=5))
    con = lake.connect(tmp_path)
    assert con.execute("select last_step from run_summary where run_id = 'contract-run'").fetchone() == (5,)


def test_weeks_are_the_datas_own_and_include_empty_ones(tmp_path):
    """Runs that ended months before the report: weeks of 7 days counted back from the newest run's day
    (2026-06-10), an empty week listed with 0 runs, and week over week compares the last two."""
    ends = {"w4-oom": ("cuda_oom", datetime(2026, 6, 10, 9)), "w4-a": ("completed", datetime(2026, 6, 5, 9)),
            "w4-b": ("completed", datetime(2026, 6, 4, 9)), "w3-hang": ("hang", datetime(2026, 5, 30, 9)),
            "w1-a": ("completed", datetime(2026, 5, 20, 9))}
    specs = [RunSpec(run_id=rid, failure_class=cls, n_steps=10, ended_at=end, seed=i)
             for i, (rid, (cls, end)) in enumerate(ends.items())]
    warehouse = build_warehouse(tmp_path / "wh", specs)
    weeks = data_of_fleet(warehouse, date(2026, 12, 1)).weeks
    assert [(w["week_start"], w["week_end"], w["runs"], w["failed"]) for w in weeks] == [
        (date(2026, 5, 14), date(2026, 5, 20), 1, 0),
        (date(2026, 5, 21), date(2026, 5, 27), 0, 0),
        (date(2026, 5, 28), date(2026, 6, 3), 1, 1),
        (date(2026, 6, 4), date(2026, 6, 10), 3, 1),
    ]
    doc = page(render_fleet_report(warehouse, tmp_path / "rep", date(2026, 12, 1)))
    wow = {r.find_all("td")[0].text(): [td.text() for td in r.find_all("td")[1:3]]
           for r in doc.find("table", id_="week-over-week").find_all("tr") if r.find_all("td")}
    assert wow["Runs ended"] == ["3", "1"] and wow["Failed or hung"] == ["1", "1"]
    assert wow["Failure rate"] == ["33 %", "100 %"]
    assert "the newest ended 2026-06-10" in doc.find("header").text()


def data_of_fleet(warehouse, day):
    from pipeline.report.fleet_data import load_fleet

    return load_fleet(warehouse, day)


def test_config_groups_are_the_settings_that_fix_a_steps_work(tmp_path):
    """The same model from two folders is one group; another batch size is another group."""
    specs = [RunSpec(run_id="a", model_path="Qwen/Qwen2.5-7B-Instruct", ended_at=datetime(2026, 11, 20)),
             RunSpec(run_id="b", model_path="/mnt/hf/Qwen2.5-7B-Instruct/", ended_at=datetime(2026, 11, 21)),
             RunSpec(run_id="c", model_path="Qwen/Qwen2.5-7B-Instruct", train_batch_size=512,
                     ended_at=datetime(2026, 11, 22))]
    warehouse = build_warehouse(tmp_path / "wh", specs)
    groups = {g["config_group"]: g["runs"] for g in data_of_fleet(warehouse, DAY).groups}
    assert groups == {"Qwen2.5-7B-Instruct · grpo · n=8 · batch 256/64 · 8 GPUs · vllm": 2,
                      "Qwen2.5-7B-Instruct · grpo · n=8 · batch 512/64 · 8 GPUs · vllm": 1}
    doc = page(render_fleet_report(warehouse, tmp_path / "rep", DAY))
    shown = [r.find_all("td")[0].text() for r in doc.find("table", id_="config-groups").find_all("tr")[1:]]
    assert shown == list(groups)


def test_runs_whose_log_names_no_model_are_compared_with_nothing(tmp_path):
    """Three runs with no model in their logs (and no experiment) are no config group: the last one, twice as
    slow per step, is no regression; the group table lists them as settings not in the log."""
    specs = [RunSpec(run_id=f"anon-{i}", model_path=None, experiment=None, step_s=30 * (2 if i == 2 else 1),
                     ended_at=datetime(2026, 11, 20 + i), seed=i) for i in range(3)]
    warehouse = build_warehouse(tmp_path / "wh", specs)
    doc = page(render_fleet_report(warehouse, tmp_path / "rep", DAY))
    assert not doc.find_all("table", id_="regression-table")
    rows = doc.find("table", id_="config-groups").find_all("tr")[1:]
    assert [(r.find_all("td")[0].text(), r.find_all("td")[1].text()) for r in rows] == [("settings not in the log", "3")]


def _val_metrics(values: dict[int, float]) -> pa.Table:
    steps = sorted(values)
    return pa.table({"step": pa.array(steps, pa.int64()), "key": ["val-core/openai/gsm8k/acc/mean@1"] * len(steps),
                     "value": [values[s] for s in steps], "source": ["console"] * len(steps),
                     "segment": pa.array([0] * len(steps), pa.int32())})


def test_verl_signals_and_validation_against_earlier_runs_of_the_group(tmp_path):
    """MFU 0.3 against earlier runs of its group at 0.4 and 0.5 (median 0.45: ×0.67); validation accuracy
    0.2 -> 0.5 -> 0.4 (first, best, last) against the earlier runs' last values 0.3 and 0.5 (median 0.4)."""
    specs = [RunSpec(run_id="old-1", mfu_actor=0.4, ended_at=datetime(2026, 11, 20)),
             RunSpec(run_id="old-2", mfu_actor=0.5, ended_at=datetime(2026, 11, 21)),
             RunSpec(run_id="other-group", mfu_actor=0.9, n_gpus_per_node=4, ended_at=datetime(2026, 11, 22)),
             RunSpec(run_id="now", mfu_actor=0.3, ended_at=datetime(2026, 11, 27))]
    warehouse = tmp_path / "wh"
    for spec in specs:
        write_run(warehouse, spec)
    for rid, values in (("old-1", {10: 0.1, 20: 0.3}), ("old-2", {10: 0.5}), ("other-group", {10: 0.9}),
                        ("now", {10: 0.2, 20: 0.5, 30: 0.4})):
        lake.write_run_table(warehouse, "step_metrics", rid, _val_metrics(values))
    build_warehouse(warehouse, [])
    doc = page(render_run_report(warehouse, "now", tmp_path / "rep"))
    mfu = doc.find("table", id_="verl-signals").find("tr", data_key="perf/mfu/actor").find_all("td")
    assert [td.text().split(" (")[0] for td in mfu[1:4]] == ["0.3", "0.45", "×0.67"]
    assert "worse" in mfu[3].find("span").classes
    val = doc.find("table", id_="validation").find("tr", data_source="openai/gsm8k").find_all("td")
    assert val[1].text() == "acc (mean@1)"
    assert [td.text().split(" (")[0] for td in val[2:6]] == ["0.2", "0.4", "0.5", "0.4"]


def test_fleet_first_change_is_the_change_most_runs_of_the_class_got(tmp_path):
    """Three OOM runs: all three were told to lower the actor's micro batch (8 -> 4, 16 -> 8, one not shown), two
    of them first the rollout's memory share; the fleet names the micro batch, in 3 of 3 runs, linked (not the
    first row of most runs). Two hung runs got only checks: no change is named for them."""
    from report_fixtures import RUN_ADVICE_SCHEMA

    micro, util = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.gpu_memory_utilization"
    advice = {
        "oom-a": [(1, "config", micro, "8", "4"), (2, "check", None, None, None)],
        "oom-b": [(1, "config", util, "0.8", "0.7"), (2, "config", micro, "16", "8")],
        "oom-c": [(1, "config", util, "0.9", "0.8"), (2, "config", micro, None, "lower (halve it)")],
        "hang-a": [(1, "check", None, None, None)],
        "hang-b": [(1, "check", None, None, None)],
    }
    warehouse = tmp_path / "wh"
    specs = [RunSpec(run_id=rid, failure_class="cuda_oom" if rid.startswith("oom") else "hang", n_steps=5,
                     ended_at=datetime(2026, 11, 20 + i), seed=i) for i, rid in enumerate(advice)]
    build_warehouse(warehouse, specs)
    for rid, rows in advice.items():
        lake.write_run_table(warehouse, "run_advice", rid, pa.Table.from_pylist(
            [{"episode_id": None, "rank": r, "kind": k, "setting": st, "current_value": c, "suggested_value": sv,
              "why": "w", "source": "https://verl.readthedocs.io"} for r, k, st, c, sv in rows],
            schema=RUN_ADVICE_SCHEMA))
    doc = page(render_fleet_report(warehouse, tmp_path / "rep", DAY))
    oom = doc.find("table", id_="failure-counts").find("tr", data_class="cuda_oom").find("td", cls="first-change")
    assert oom.text().startswith(f"{micro} → lower (in 3 of 3 runs:")
    assert [a.attrs["href"] for a in oom.find_all("a")] == [f"../runs/{r}.html" for r in ("oom-a", "oom-b", "oom-c")]
    hang = doc.find("table", id_="failure-counts").find("tr", data_class="hang").find("td", cls="first-change")
    assert hang.text() == ""
    text = (tmp_path / "rep" / "fleet" / "latest.txt").read_text(encoding="utf-8")
    assert f"| {micro} -> lower (in 3 of 3 runs: oom-a, oom-b, oom-c)\n" in text


def test_a_training_failure_puts_a_run_among_the_failures_of_the_fleet():
    """A run whose log just ends (no_outcome) but whose training collapsed is listed with the failures, with its
    onset; the first screen counts it among the failed and not again under how its log ended, so the outcomes
    add up to the window's runs; the outcomes table still lists it once under its class."""
    from pipeline.report.fleet_data import FleetReportData, FleetRun
    from pipeline.report.fleet_page import fleet_context

    def run(rid, cls, attention, outcome=None):
        return FleetRun(run_id=rid, failure_class=cls, last_step=59, expected_steps=100, goodput=0.6,
                        median_step_s=10.0, bottleneck_phase="gen", experiment="e", config_group="g",
                        ended_at=datetime(2026, 11, 27), ended_by_file_time=False, episodes=0, anomalous_steps=0,
                        top_anomaly=None, root_cause_text="", training_outcome=outcome,
                        training_outcome_step=36 if outcome else None, attention=attention)

    # attention as run_attention decides it (tests/test_run_attention.py)
    runs = [run("cut", "no_outcome", 0, "collapsed"), run("fine", "no_outcome", 3), run("oom", "cuda_oom", 0)]
    got = fleet_context(FleetReportData(day=DAY, runs=runs))
    assert got["training_counts"] == [("collapsed", "Training collapsed", 1)]
    assert (got["n_failed"], got["n_no_outcome"], got["n_window"]) == (2, 1, 3)
    assert got["window_training"] == [("Training collapsed", 1)]
    assert dict(got["counts"]) == {"no_outcome": 2, "cuda_oom": 1}


def test_sources_are_links_a_reader_can_follow():
    from pipeline.report.advice import sources

    got = sources("https://verl.readthedocs.io/en/latest/advance/checkpoint.html")
    assert [(s.text, s.href) for s in got] == [
        ("verl.readthedocs.io/en/latest/advance/checkpoint.html",
         "https://verl.readthedocs.io/en/latest/advance/checkpoint.html")]
    assert sources(None) == []


def test_verl_signals_fall_back_to_the_model_setup(tmp_path):
    """With no earlier run of its config group, a run's signals are compared with the earlier runs of its model
    setup (same model, algorithm, engine; another batch size here): MFU 0.25 against 0.5 is ×0.50."""
    specs = [RunSpec(run_id="setup-old", mfu_actor=0.5, train_batch_size=512, ended_at=datetime(2026, 11, 20)),
             RunSpec(run_id="lonely", mfu_actor=0.25, ended_at=datetime(2026, 11, 27))]
    warehouse = build_warehouse(tmp_path / "wh", specs)
    doc = page(render_run_report(warehouse, "lonely", tmp_path / "rep"))
    mfu = doc.find("table", id_="verl-signals").find("tr", data_key="perf/mfu/actor").find_all("td")
    assert [td.text().split(" (")[0] for td in mfu[1:4]] == ["0.25", "0.5", "×0.50"]
    assert "the 1 earlier run of its model setup (Qwen2.5-7B-Instruct · grpo · vllm)" in doc.find("p", id_="peers").text()
    alone = page(render_run_report(warehouse, "setup-old", tmp_path / "rep"))
    assert "there are none yet" in alone.find("p", id_="peers").text()


def test_every_anomaly_class_has_a_plain_label():
    from pipeline import vocabulary
    from pipeline.report.labels import ANOMALY_LABELS

    assert set(ANOMALY_LABELS) == {*vocabulary.ANOMALY_CLASSES, vocabulary.OTHER_ANOMALY}


def test_baselines_count_the_earlier_runs_of_experiment_and_group(built):
    """run-anomalous ended 3 h before the day's end: before it, 9 runs of exp-a (one per class but completed,
    which ended later) and those 9 plus run-hostile (exp-b, same settings) in its config group. The earliest
    run (run-unknown) has nothing to compare with."""
    rows = page(built["pages"]["run-anomalous"]).find("table", id_="baselines").find_all("tr")[1:]
    got = [(r.find_all("td")[0].text().split("Qwen")[0].split("exp-a")[0], r.find_all("td")[1].text()) for r in rows]
    assert got == [("same experiment", "9"), ("same config group", "10")]
    first = page(built["pages"]["run-unknown"])
    assert not first.find_all("table", id_="baselines") and first.find("p", id_="no-baselines")


def test_run_header_says_when_the_run_ran_with_the_zone(built):
    """run-cuda-oom ended 2026-11-24 12:00 by its log (every_class_specs: 4 days before the 28th at noon)."""
    text = page(built["pages"]["run-cuda-oom"]).find("span", id_="run-times").text()
    assert text.endswith("ended 2026-11-24 12:00 log clock") and text.startswith("started 2026-11-24 11:")


def test_event_classes_read_as_words(built):
    """The fixture's cuda_oom event is listed as 'CUDA out of memory'; a detail after ':' is kept as written."""
    from pipeline.report.labels import event_label

    cell = page(built["pages"]["run-cuda-oom"]).find("table", id_="events").find("td", data_class="cuda_oom")
    assert cell.text() == "CUDA out of memory"
    assert event_label("ray_task_error:OutOfMemoryError") == "Ray task error: OutOfMemoryError"
    assert event_label("some_new_class") == "some new class"


def test_reports_rendered_one_after_another_read_only_their_own_warehouse(tmp_path):
    """Run reports share one DuckDB database per process: the second warehouse (run summary only, the run
    completed) shows nothing of the first's tables (the same run id there ended in a CUDA OOM with events)."""
    write_run(tmp_path / "a", RunSpec(run_id="same-id", failure_class="cuda_oom", n_steps=12, seed=1))
    write_run(tmp_path / "b", RunSpec(run_id="same-id", failure_class="completed", n_steps=12, seed=1,
                                      with_logs=False), only=("runs", "run_summary"))
    first = render_run_report(tmp_path / "a", "same-id", tmp_path / "ra").read_text()
    second = render_run_report(tmp_path / "b", "same-id", tmp_path / "rb").read_text()
    assert 'data-failure-class="cuda_oom"' in first and 'id="events"' in first
    assert 'data-failure-class="completed"' in second
    assert 'id="events"' not in second and 'id="phase-table"' not in second


def test_fleet_data_of_an_older_warehouse_counts_each_anomalous_step_as_an_episode(tmp_path):
    """A run_summary without most columns and a step_anomalies written before episodes were numbered: the
    runs are read from the columns there are, and run_attention counts each anomalous step as an episode."""
    from pipeline.report.fleet_data import load_fleet

    wh = tmp_path / "wh"
    lake.write_run_table(wh, "run_summary", "old-run", pa.table({"failure_class": ["cuda_oom"], "last_step": [4]}))
    lake.write_run_table(wh, "step_anomalies", "old-run", pa.table({
        "step": pa.array([1, 2, 3, 4], pa.int64()), "is_anomaly": [True, False, True, True],
        "anomaly_class": ["kl_spike", None, "kl_spike", "grad_explosion"]}))
    derive.derive_fleet_table(wh, "run_attention")
    [run] = load_fleet(wh, DAY).runs
    assert (run.run_id, run.failure_class, run.last_step, run.goodput) == ("old-run", "cuda_oom", 4, None)
    assert (run.episodes, run.anomalous_steps, run.top_anomaly) == (3, 3, "kl_spike")


def test_the_fleet_page_is_drawn_without_matplotlib(built, tmp_path):
    """The page's charts are SVG: rendering it in a fresh process imports no matplotlib (only a mail draws PNGs)."""
    code = ("import sys, datetime\nfrom pipeline.report import render_fleet_report\n"
            f"render_fleet_report({str(built['warehouse'])!r}, {str(tmp_path)!r}, datetime.date(2026, 11, 28))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert page(tmp_path / "fleet" / "2026-11-28.html").find("div", data_chart="weekly") is not None
