"""`analyze` end to end on the real verl logs: every asset, the shared checker, a report per run."""

from __future__ import annotations

import subprocess
import sys

from pipeline.lake import connect


def test_every_real_log_is_analysed_and_reported(analyzed_real_logs):
    logs = sorted(p for p in analyzed_real_logs.archive.iterdir() if p.is_file())
    outcome = analyzed_real_logs.outcome
    assert len(outcome.run_ids) == len(logs)
    assert outcome.fleet_report is not None and outcome.fleet_report.is_file()
    for run_id in outcome.run_ids:
        assert (analyzed_real_logs.reports / "runs" / f"{run_id}.html").is_file()


def test_shared_checker_finds_every_line_and_pair(analyzed_real_logs, shared_dir):
    proc = subprocess.run(
        [sys.executable, str(shared_dir / "tools" / "check_real_logs.py"), str(analyzed_real_logs.archive),
         str(analyzed_real_logs.warehouse)],
        capture_output=True, text=True, check=False,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last.endswith("problems 0"), last


def test_real_runs_are_scored_with_the_fleet_model(analyzed_real_logs):
    con = connect(analyzed_real_logs.warehouse)
    scored = dict(con.execute(
        "select regexp_extract(run_id, '^(\\d+)_', 1), count(*) from step_anomalies group by all").fetchall())
    steps = dict(con.execute(
        "select regexp_extract(run_id, '^(\\d+)_', 1), count(*) from step_phases group by all").fetchall())
    assert scored == steps
    flagged = con.execute(
        "select min(step), max(step) from step_anomalies "
        "where run_id like '15_%' and anomaly_class = 'response_length_collapse' and is_anomaly").fetchone()
    assert flagged[0] is not None and 30 <= flagged[0] <= 40 and flagged[1] == 59
    assert con.execute(
        "select count(*) from step_anomalies where run_id like '16_%' and is_anomaly").fetchone()[0] == 0


def test_paused_run_report_says_debugger_not_failure(analyzed_real_logs):
    from report_fixtures import parse_html

    run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("35_"))
    doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
    verdict = doc.find("section", id_="verdict")
    # a person attached a debugger (LABELS.jsonl): held on purpose, not a hang
    assert verdict.attrs["data-failure-class"] == "interrupted"
    assert "Held at a debugger breakpoint" in verdict.text()


def test_oom_report_advises_the_runs_own_log_prob_micro_batch(analyzed_real_logs, real_logs_dir):
    """Log 18 ran out of memory in compute_log_prob; its config dump sets the rollout's
    log_prob_micro_batch_size (early-2025 verl's global key) to 128: the report says halve it to 64."""
    import re

    from report_fixtures import parse_html

    text = next(real_logs_dir.glob("18_*.log")).read_text(errors="replace")
    dumped = set(re.findall(r"'log_prob_micro_batch_size': (\d+)", text))
    assert dumped == {"128"}
    run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("18_"))
    doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
    first = doc.find("table", id_="run-advice").find("tbody").find("tr")
    assert first.attrs["data-setting"] == "actor_rollout_ref.rollout.log_prob_micro_batch_size"
    assert first.find("td", cls="current").text() == "128" and first.find("td", cls="suggested").text() == "64"


def test_run_report_folds_step_lines_and_lists_events_not_frames(analyzed_real_logs):
    """Log 16 ends on its step:11 line, a few thousand characters of metrics: the excerpt shows its head and
    how many metrics it folded. Log 08's event table lists its KeyboardInterrupt, not each traceback frame."""
    from report_fixtures import parse_html

    def page(prefix: str):
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(prefix))
        return parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))

    last = page("16_").find("pre", id_="last-line-context").find_all("span", cls="ln")[-1].text()
    assert "step:11 - " in last and last.endswith("metrics)") and len(last) < 220
    events = page("08_").find("table", id_="events").text()
    assert "KeyboardInterrupt" in events and "traceback_frame" not in events


def test_wall_time_reads_every_clock_the_log_prints_and_unknown_stays_unknown(analyzed_real_logs, real_logs_dir):
    """Logs 02, 10, 11, 18 and 21 print one dated stamp (Ray's start) and then only year-less vLLM or glog
    clocks: their wall time spans at least from that stamp to the last clock, as read here from the text.
    A run whose log measures no time says 'unknown', never 0 s."""
    import re
    from datetime import datetime

    from report_fixtures import parse_html

    clock = re.compile(r"^(?:\x1b\[[0-9;]*m)?(?:\([^)]*\)(?:\x1b\[[0-9;]*m)? ?)?(?:"
                       r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d) |(?:INFO|WARNING|ERROR) (?P<mo2>\d\d)-(?P<d2>\d\d) |"
                       r"[IWEF](?P<mo3>\d\d)(?P<d3>\d\d) )(?P<t>\d\d:\d\d:\d\d)")
    con = connect(analyzed_real_logs.warehouse)
    wall = dict(con.execute("select regexp_extract(run_id, '^(\\d+)_', 1), wall_time_s from run_summary").fetchall())
    for prefix in ("02", "10", "11", "18", "21"):
        stamps, year = [], None
        for line in next(real_logs_dir.glob(f"{prefix}_*.log")).read_text(errors="replace").splitlines():
            if found := clock.match(line):
                year = found["y"] or year
                month, day = (found["mo"] or found["mo2"] or found["mo3"]), (found["d"] or found["d2"] or found["d3"])
                stamps.append(datetime.fromisoformat(f"{year}-{month}-{day} {found['t']}"))
        span = (max(stamps) - min(stamps)).total_seconds()
        assert span > 30 and span - 1 <= wall[prefix] < span + 3600, (prefix, span, wall[prefix])
    assert wall["11"] > 30 * 60  # the TPU run's compilation and its OOM came 31 min after its start
    unknown = [p for p, w in wall.items() if w is None]
    assert unknown
    for prefix in unknown:
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        card = next(c for c in doc.find_all("div", cls="card") if c.find("div", cls="label").text() == "Wall time")
        assert card.find("div", cls="value").text() == "unknown"
        assert " after 0 s" not in doc.find("section", id_="verdict").text()


def test_words_match_the_evidence(analyzed_real_logs, real_logs_dir):
    """Log 11 ran out of a TPU's HBM (XLA says so): not 'CUDA' in words, though its class stays cuda_oom.
    Logs 24 and 25 failed in torch.distributed's rendezvous (c10d TCPStore, a socket timeout), not in an NCCL
    collective. Log 27 is an excerpt with no step line: its step is unknown, not 'Completed 0 steps'. No page
    names an internal article or file; a run whose own evidence names its cause gets no generic cause list."""
    from report_fixtures import parse_html

    def text_of(prefix: str) -> str:
        return next(real_logs_dir.glob(f"{prefix}_*.log")).read_text(errors="replace")

    def page(prefix: str):
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        return parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))

    from pipeline.vocabulary import FAILURE_DETAILS

    details = connect(analyzed_real_logs.warehouse).execute(
        "select distinct failure_detail from run_summary where failure_detail is not null").fetchall()
    assert {d for (d,) in details} <= set(FAILURE_DETAILS)
    assert "XLA:TPU" in text_of("11") and "memory space hbm" in text_of("11")
    verdict = page("11").find("section", id_="verdict")
    assert verdict.attrs["data-failure-class"] == "cuda_oom"
    assert verdict.find("p", cls="headline").text() == "TPU HBM out of memory"
    assert "CUDA" not in verdict.text()
    fleet = parse_html((analyzed_real_logs.reports / "fleet" / "latest.html").read_text(encoding="utf-8"))
    row = next(r for r in fleet.find_all("tr", cls="run") if r.attrs["data-run-id"].startswith("11_"))
    assert "TPU HBM out of memory" in row.text() and "CUDA" not in row.text()
    for prefix in ("24", "25"):
        assert "c10d" in text_of(prefix) or "TCPStore" in text_of(prefix)
        verdict = page(prefix).find("section", id_="verdict")
        assert verdict.find("p", cls="headline").text() == "Distributed rendezvous failed"
        assert "NCCL" not in verdict.text() and "watchdog" not in verdict.text()
    import re

    assert not re.search(r"(?:^|\s)step:\d+ - ", text_of("27"))  # its final step line lost its head
    sentence = page("27").find("section", id_="verdict").find("p", cls="sentence").text()
    assert "the last step is unknown" in sentence and "0 steps" not in sentence
    for run_id in analyzed_real_logs.outcome.run_ids:
        html = (analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
        assert "DESIGN.md" not in html and "verl log analysis guide" not in html, run_id
    oom = page("18")
    assert oom.find("table", id_="run-advice") is not None
    assert "Likely causes" not in oom.find("div", id_="failure-advice").text()


def test_a_run_that_just_ends_shows_its_true_last_line(analyzed_real_logs, real_logs_dir):
    """Logs 34 and 06 go on after their last stamped lines (caught errors a rollout worker logged and
    survived): the line shown as where the log ends is the file's last line with text, as read here."""
    import re

    from report_fixtures import parse_html

    for prefix in ("34", "06"):
        log = next(real_logs_dir.glob(f"{prefix}_*.log"))
        bare = [re.sub(r"^\s*\([^)]*\)", "", re.sub(r"\x1b\[[0-9;]*m", "", line)).strip()
                for line in log.read_bytes().decode(errors="replace").split("\n")]
        last = max(i for i, text in enumerate(bare, start=1) if text)
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        assert doc.find("span", id_="last-line-location").text() == f"{log.name}:{last}"
        shown = [s.attrs["data-line"] for s in doc.find("pre", id_="last-line-context").find_all("span", cls="cause")]
        assert shown == [str(last)]


def test_a_log_holding_two_runs_says_so_and_times_only_the_last(analyzed_real_logs, real_logs_dir):
    """Logs 07 and 08 each hold a run that completed (verl's final validation) and then a second launch that
    was stopped: the report says the log holds two runs and the first run's hours are not the second's time
    (08 spans about 18 h of clock, its second run one of them)."""
    import re
    from datetime import datetime

    from report_fixtures import parse_html

    con = connect(analyzed_real_logs.warehouse)
    for prefix in ("07", "08"):
        text = next(real_logs_dir.glob(f"{prefix}_*.log")).read_text(errors="replace")
        launches = [m.start() for m in re.finditer(r"^\+ python3? -m verl\.trainer\.main_ppo", text, re.M)]
        assert len(launches) == 2 and "Final validation metrics" in text[launches[0]:launches[1]]
        stamps = [datetime.fromisoformat(s) for s in re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)]
        second = text[launches[1]:]
        later = [datetime.fromisoformat(s) for s in re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", second)]
        earlier_runs, resumes, wall = con.execute(
            "select earlier_runs, resume_count, wall_time_s from run_summary where run_id like $p",
            {"p": f"{prefix}_%"}).fetchone()
        assert (earlier_runs, resumes) == (1, 0)
        whole = (max(stamps) - min(stamps)).total_seconds()
        assert wall < whole / (2 if prefix == "08" else 1), (prefix, wall, whole)
        if len(later) > 1:
            assert wall >= (max(later) - min(later)).total_seconds() - 1
        started = con.execute("select started_at from run_baselines where run_id like $p", {"p": f"{prefix}_%"})
        # the second run starts with its launch (its segment opens at its config dump, seconds later)
        assert 0 <= (started.fetchone()[0] - min(later)).total_seconds() < 120
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        assert doc.find("p", id_="earlier-runs").text().startswith("This log holds 2 runs")
    assert con.execute("select count(*) from run_summary where earlier_runs > 0").fetchone()[0] == 2


def test_caught_errors_are_grouped_as_non_fatal(analyzed_real_logs, real_logs_dir):
    """Logs 34 and 06 end with no error: their rollout workers logged 'Error extracting action for item ...'
    again and again and went on. The report groups them as 'N caught <template> (non-fatal)', N as counted
    here in the text; a run an error ended (18's OOM) has no such list."""
    import re

    from report_fixtures import parse_html

    def page(prefix: str):
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        return parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))

    for prefix in ("34", "06"):
        text = next(real_logs_dir.glob(f"{prefix}_*.log")).read_bytes().decode(errors="replace")
        n = len(re.findall(r"^.*ERROR:.*Error extracting action for item", text, re.M))
        items = [li.text() for li in page(prefix).find("div", id_="caught-errors").find_all("li")]
        grouped = [i for i in items if "Error extracting action for item <*>" in i]
        assert len(grouped) == 1 and grouped[0].startswith(f"{n} caught ") and "(non-fatal)" in grouped[0], items
    assert "caught-errors" not in (analyzed_real_logs.reports / "runs").joinpath(
        next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("18_")) + ".html").read_text()


def test_fleet_first_screen_counts_one_window_that_adds_up(analyzed_real_logs, real_logs_dir):
    """The real logs are all new to the warehouse: the first screen's week holds every run of the page, its
    outcome counts add up to that number and to the Runs card; the outcomes table adds up to every run; each run and
    class says its GPU-hours lost (08: 16 GPUs, as its config dump says, for its whole time: no checkpoint);
    runs that kept verl's default project and experiment names are no experiment together."""
    import re

    from report_fixtures import parse_html

    logs = sorted(real_logs_dir.glob("*.log"))
    doc = parse_html((analyzed_real_logs.reports / "fleet" / "latest.html").read_text(encoding="utf-8"))
    sentence = doc.find("section", id_="verdict").text()
    window = int(re.search(r"Of these (\d+):", sentence)[1])
    parts = re.search(r"Of these \d+: (\d+) failed, (\d+) hung, (\d+) completed, (\d+) stopped on purpose, (\d+) with no"
                      r" outcome in the log", sentence)
    # the page is for the report day: runs whose only time is their file's (copied today) end after it
    on_page = len(doc.find("table", id_="all-runs-table").find("tbody").find_all("tr", cls="run"))
    assert int(re.search(r"(\d+) runs in the warehouse in all", sentence)[1]) == on_page
    assert window == on_page == sum(int(n) for n in parts.groups())
    cards = {c.find("div", cls="label").text(): c.find("div", cls="value").text() for c in doc.find_all("div", cls="card")}
    assert cards["Runs this week"] == str(on_page)
    rows = doc.find("table", id_="failure-counts").find("tbody").find_all("tr")
    assert sum(int(r.find_all("td")[1].text()) for r in rows) == on_page
    assert all(r.find("td", cls="gpu-hours") is not None for r in rows)

    con = connect(analyzed_real_logs.warehouse)
    text = next(real_logs_dir.glob("08_*.log")).read_text(errors="replace")
    gpus = {int(n) for n in re.findall(r"'n_gpus_per_node': (\d+)", text)}
    assert gpus == {16}
    wall, goodput, lost = con.execute("select wall_time_s, goodput, gpu_hours_lost from run_summary "
                                      "where run_id like '08_%'").fetchone()
    assert goodput == 0 and abs(lost - wall * 16 / 3600) < 1e-6

    default = [p.stem for p in logs if "'project_name': 'verl_examples'" in p.read_text(errors="replace")
               and "'experiment_name': 'gsm8k'" in p.read_text(errors="replace")]
    assert default
    grouped = con.execute("select run_id, experiment_name, exp_prior_runs from run_baselines "
                          "where list_contains($ids, run_id)", {"ids": default}).fetchall()
    assert [(g[1], g[2]) for g in grouped] == [(None, 0)] * len(default)


def test_wandb_line_cuts_are_reported_in_data_completeness(analyzed_real_logs, real_logs_dir):
    """Logs 14, 15 and 16 are W&B output.log captures, whose lines stop at 4096 characters: the report's
    data completeness says how many lines were cut, as counted here in the text."""
    from report_fixtures import parse_html

    for prefix in ("14", "15", "16"):
        log = next(real_logs_dir.glob(f"{prefix}_*.log"))
        n = sum(len(line) == 4096 for line in log.read_bytes().decode(errors="replace").split("\n"))
        assert n
        run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith(f"{prefix}_"))
        doc = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        problems = [li.text() for li in doc.find("ul", id_="problems").find_all("li")]
        assert f"{log.name}: {n} line(s) exactly 4096 characters long" in " ".join(problems), problems


def test_a_run_of_one_step_gets_no_chart_of_one_point(analyzed_real_logs, real_logs_dir):
    """Log 33 shows one training step (its one `step:60 - ` line): no full-width chart of one point, a note
    that points at the values instead."""
    import re

    from report_fixtures import parse_html

    text = next(real_logs_dir.glob("33_*.log")).read_text(errors="replace")
    assert set(re.findall(r"(?:^|\s)step:(\d+) - ", text)) == {"60"}
    run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("33_"))
    html = (analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
    assert 'data-panel=' not in html
    assert parse_html(html).find("p", id_="no-health-chart").text().startswith("One step was logged")


def test_a_relaunched_log_is_reported_as_its_last_launch(tmp_path, real_logs_dir):
    """A log holding a run that collapsed (log 14: entropy and length, from step 8) and completed, then a new
    launch stopped at step 5: the steps after 5 are the earlier run's. The last run has no training outcome (it
    said "collapsed from step 8", three steps after its last), and its per-step tables, anomalies, median step
    and phase breakdown are its own five steps' (they drew the earlier run's 261). Its events are the last
    launch's and those of the run's other file (a rollout worker's log: its start-up is not the driver's)."""
    import re
    import statistics

    from report_fixtures import parse_html

    from pipeline.defs.analysis import analyze_archive

    first = next(real_logs_dir.glob("14_*.log")).read_text(errors="replace")
    lines = first.splitlines()
    cut = next(i for i, line in enumerate(lines) if re.search(r"\bstep:5 - ", line))
    relaunch = [line for line in lines[: cut + 1] if re.search(r"\bstep:[1-5] - ", line)]
    step_s = [float(re.search(r"timing_s/step:([0-9.]+)", line).group(1)) for line in relaunch]
    reward_s = sum(float(re.search(r"timing_s/reward:([0-9.eE-]+)", line).group(1)) for line in relaunch)
    assert len(step_s) == 5 and 0 < reward_s < 0.5
    run = tmp_path / "archive" / "relaunched"
    run.mkdir(parents=True)
    # the earlier run logs a warning (log 07's, as torch prints it); the relaunch logs none
    warning = ("/usr/local/lib/python3.11/dist-packages/torch/utils/checkpoint.py:1399: FutureWarning: "
               "`torch.cpu.amp.autocast(args...)` is deprecated.")
    earlier = first.rstrip("\n") + f"\n{warning}\n(TaskRunner pid=1) Final validation metrics: {{'val-core/reward/mean@1': 0.1}}\n"
    (run / "relaunched.log").write_text(earlier + "\n".join(lines[: cut + 1]) + "\n")
    # the worker's own log, one segment of its own (log 07's vLLM warning)
    (run / "rollout_worker.log").write_text(
        "(WorkerDict pid=2) WARNING 03-31 20:20:43 config.py:380] To see benefits of async output processing, "
        "enable CUDA graph. Since, enforce-eager is enabled, async output processor cannot be used\n")
    archive = tmp_path / "archive"
    analyze_archive(archive, tmp_path / "warehouse", tmp_path / "reports")
    con = connect(tmp_path / "warehouse")
    row = con.execute("select earlier_runs, last_step, training_outcome from run_summary").fetchone()
    assert row == (1, 5, None)
    assert con.execute("select list(step order by step) from step_phases").fetchone()[0] == [1, 2, 3, 4, 5]
    assert con.execute("select max(step) from step_health").fetchone()[0] == 5
    assert con.execute("select max(step) from step_anomalies").fetchone()[0] == 5
    median = con.execute("select median_step_s from run_step_time").fetchone()[0]
    assert abs(median - statistics.median(step_s)) < 1e-6
    html = (tmp_path / "reports" / "runs" / "relaunched.html").read_text()
    assert "collapsed" not in html.lower()
    # the earlier run's warning is no event of the last run's
    assert con.execute("select count(*) from run_events where contains(message, 'FutureWarning')").fetchone()[0] == 1
    assert "FutureWarning" not in html
    assert "async output processing" in parse_html(html).find("table", id_="events").text()
    reward_row = next(r for r in parse_html(html).find("table", id_="phase-table").find_all("tr")
                      if r.find_all("td") and r.find_all("td")[0].text().strip() == "reward")
    # the phase's few milliseconds in all, not "0 s"
    assert reward_row.find_all("td")[3].text().strip() == f"{reward_s:.2g} s"


def test_a_relaunched_real_logs_report_is_about_its_last_run(analyzed_real_logs, real_logs_dir):
    """Log 07 holds a completed run, then a relaunch stopped at step 94 whose clocks stop at its start-up: the
    caught errors its report lists are the last run's (it listed the earlier run's worker death, line 2,844),
    and it ended at its first clock plus its steps' timers (8 h 46 m), not at its last clock three minutes in."""
    import re
    from datetime import datetime, timedelta

    from report_fixtures import parse_html

    # numbered as verl-health numbers them, by "\n" (the log's tqdm bars hold carriage returns)
    lines = next(real_logs_dir.glob("07_*.log")).read_text(errors="replace").split("\n")
    boundary = max(n for n, line in enumerate(lines, 1) if "Final validation metrics" in line)
    last_run = lines[boundary:]
    clock = next(m for line in last_run if (m := re.search(r"WARNING (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ", line)))
    started = datetime(2025, *(int(g) for g in clock.groups()))
    # a step's wall time is verl's step timer plus its validation and checkpoint, which run after it closes
    steps_s = sum(float(t) for line in last_run
                  for t in re.findall(r"timing_s/(?:step|testing|save_checkpoint):([0-9.]+)", line))
    assert steps_s > 8 * 3600

    run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("07_"))
    html = (analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
    page = parse_html(html)
    times = page.find("span", id_="run-times").text()
    assert f"started {started:%Y-%m-%d %H:%M}" in times, times
    assert f"ended about {started + timedelta(seconds=steps_s):%Y-%m-%d %H:%M}" in times, times
    # what stopped it (its label's KeyboardInterrupt) is no error it went on from, nor is the earlier run's
    stop = max(n for n, line in enumerate(lines, 1) if line.strip() == "KeyboardInterrupt")
    cited = [int(span.text().rsplit(":", 1)[1]) for div in page.find_all("div", id_="caught-errors")
             for span in div.find_all("span", cls="mono") if re.fullmatch(r"\S+:\d+", span.text())]
    assert all(boundary < n != stop for n in cited), (cited, boundary, stop)
    assert "KeyboardInterrupt</span> (non-fatal)" not in html


def test_a_run_that_outlasts_its_clocks_is_not_said_to_have_ended_at_the_last(analyzed_real_logs, real_logs_dir):
    """Log 30 retried a refused retriever 268 times, about 44 minutes of backoff (its label), after its last
    clock: its report said it ended at that clock, 49 s after it started. It now says what the clocks span."""
    import re

    from report_fixtures import parse_html

    text = next(real_logs_dir.glob("30_*.log")).read_text(errors="replace")
    stamps = sorted(re.findall(r"\b(20\d\d-\d\d-\d\d \d\d:\d\d):\d\d\b", text))
    backoff_s = sum(float(s) for s in re.findall(r"Connection refused\"\)\)\. Retrying in ([0-9.]+)s", text))
    assert backoff_s > 40 * 60
    run_id = next(r for r in analyzed_real_logs.outcome.run_ids if r.startswith("30_"))
    html = (analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
    times = parse_html(html).find("span", id_="run-times").text()
    assert "ended" not in times, times
    assert f"the log's clocks run from {stamps[0]}" in times and f"to {stamps[-1]} log clock" in times, times
    ran = re.search(r"the (\d+) m (\d+) s it ran outlast them", times)
    assert ran and abs(int(ran.group(1)) * 60 + int(ran.group(2)) - backoff_s) < 120, times


def test_the_hours_a_run_lost_are_its_own_devices(analyzed_real_logs):
    """Logs 11 and 12 ran verl's TPU port (their names say so): their reports count TPU-hours, every other
    real log's GPU-hours, and their config groups count TPUs."""
    from report_fixtures import parse_html

    labels = {}
    for run_id in analyzed_real_logs.outcome.run_ids:
        page = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        card = next(c for c in page.find_all("div", cls="card") if c.find_all("div", id_="gpu-hours-lost"))
        labels[run_id] = card.find("div", cls="label").text()
    tpu = {r for r in labels if "_tpu_" in r}
    assert len(tpu) == 2
    assert {labels[r] for r in tpu} == {"TPU-hours lost"}
    assert {labels[r] for r in labels if r not in tpu} == {"GPU-hours lost"}
    # and a TPU run's config group is no GPU run's (both dumps say n_tpus_per_node 1)
    groups = dict(connect(analyzed_real_logs.warehouse).execute(
        "select run_id, config_group from run_baselines where config_group is not null").fetchall())
    assert all(" · 1 TPU · " in groups[r] for r in tpu), groups
    assert not any("TPU" in g for r, g in groups.items() if r not in tpu)


def test_a_log_without_a_clock_is_not_said_to_start_when_its_file_changed(analyzed_real_logs, real_logs_dir):
    """Logs that print no time at all (not even a year-less vLLM stamp): their reports said 'started' and
    'ended' at the file's modification time, a minute apart for runs of hours."""
    import re

    from report_fixtures import parse_html

    clockless = [p.name.removesuffix(".log") for p in sorted(real_logs_dir.glob("*.log"))
                 if not re.search(r"\d\d:\d\d:\d\d", p.read_text(errors="replace"))]
    assert len(clockless) >= 3
    for run_id in clockless:
        html = (analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8")
        times = parse_html(html).find("span", id_="run-times").text()
        assert times.startswith("the log prints no clock; its file last changed"), (run_id, times)
        assert "started" not in times and "ended" not in times


def test_the_steps_after_a_collapse_are_lost_device_time(analyzed_real_logs):
    """A run whose training collapsed and had not recovered produced nothing worth keeping from the collapse on
    (goodput counts them out): logs 14 and 15 end with no outcome, and showed 0 GPU-hours lost all the same."""
    con = connect(analyzed_real_logs.warehouse)
    collapsed = dict(con.execute("select run_id, gpu_hours_lost from run_summary "
                                 "where training_outcome = 'collapsed' and failure_class = 'no_outcome'").fetchall())
    assert {r[:2] for r in collapsed} == {"14", "15"}
    # neither log names its GPU count: unknown, not none lost
    assert all(h is None or h > 0 for h in collapsed.values()), collapsed


def test_the_fleet_page_keeps_tpu_hours_apart_from_gpu_hours(analyzed_real_logs):
    """The CUDA OOM row summed log 11's TPU-hours into its GPU-hours (0.674, of which 0.519 on a TPU): a TPU
    run's hours lost now say TPU-hours, in its own row and in its outcome's."""
    from report_fixtures import parse_html

    page = parse_html((analyzed_real_logs.reports / "fleet" / "latest.html").read_text(encoding="utf-8"))
    cells = {row.attrs["data-run-id"]: row.find("td", cls="gpu-hours").text()
             for row in page.find("table", id_="all-runs-table").find_all("tr", cls="run")}
    tpu = {r for r in cells if "_tpu_" in r}
    assert len(tpu) == 2 and all(cells[r].endswith("TPU-hours") for r in tpu), {r: cells[r] for r in tpu}
    assert not any("TPU" in cells[r] for r in cells if r not in tpu)
    classes = dict(connect(analyzed_real_logs.warehouse).execute(
        "select run_id, failure_class from run_summary").fetchall())
    with_tpu = {classes[r] for r in tpu}
    for row in page.find("table", id_="failure-counts").find_all("tr"):
        if "data-class" in row.attrs:
            hours = row.find("td", cls="gpu-hours").text()
            assert ("TPU-hours" in hours) == (row.attrs["data-class"] in with_tpu), (row.attrs, hours)


def test_no_error_after_the_line_that_ended_a_run_is_one_it_went_on_from(analyzed_real_logs):
    """Log 08 was stopped by Ctrl-C at its line 3,941; the exception atexit ignored on the next line is the
    stop's shutdown, yet its report listed it among the errors the run 'logged and went on' from."""
    import re

    from report_fixtures import parse_html

    ends = {r: (f, n) for r, f, n in connect(analyzed_real_logs.warehouse).execute(
        "select run_id, root_cause_file, root_cause_line_no from run_summary where root_cause_line_no is not null"
    ).fetchall()}
    listed = 0
    for run_id, (end_file, end_line) in ends.items():
        page = parse_html((analyzed_real_logs.reports / "runs" / f"{run_id}.html").read_text(encoding="utf-8"))
        for div in page.find_all("div", id_="caught-errors"):
            for span in div.find_all("span", cls="mono"):
                if m := re.fullmatch(r"(\S+):(\d+)", span.text()):
                    listed += 1
                    assert not (m.group(1) == end_file and int(m.group(2)) > end_line), (run_id, span.text())
    assert listed >= 3
