"""The nightly job and `analyze --mail` end to end on a small simulated archive: fleet tables, the fleet
report and its mail received over SMTP, with every setting read from the environment by the resources."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from dagster import DagsterInstance, build_schedule_context
from operate_support import simulate
from report_fixtures import parse_html

from pipeline import cli
from pipeline.defs import analysis
from pipeline.defs.analysis import analyze_archive
from pipeline.defs.definitions import build_definitions
from pipeline.defs.resources import WarehouseResource
from pipeline.defs.schedules import nightly_requests
from pipeline.lake import connect
from pipeline.tables import fleet_tables

DAY = dt.date(2026, 11, 30)
NOT_RUNS = {"SOURCES.md": "not a run (documentation)", "README": "not a run (documentation)",
            "labels.json": "not a run (labels)"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three simulated runs beside a README, SOURCES.md and labels.json, analysed once (no mail)."""
    root = tmp_path_factory.mktemp("nightly")
    labels = simulate(root / "sim", runs=3, seed=31)["runs"]
    archive = root / "sim" / "archive"
    for name in NOT_RUNS:
        (archive / name).write_text("notes about the runs, not a run\n")
    outcome = analyze_archive(archive, root / "warehouse", root / "reports", day=DAY)
    return SimpleNamespace(archive=archive, warehouse=root / "warehouse", reports=root / "reports",
                           labels=labels, outcome=outcome)


@pytest.fixture
def mail_settings(smtp_server, monkeypatch):
    """VERL_HEALTH_SMTP_* / _MAIL_* variables pointing at the local SMTP server; returns its inbox."""
    port, inbox = smtp_server
    for name, value in {"SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_SECURITY": "none",
                        "MAIL_FROM": "nightly@test.local", "MAIL_TO": "rl-team@test.local, oncall@test.local",
                        "REPORTS_URL": "https://health.test.local/reports/"}.items():
        monkeypatch.setenv(f"VERL_HEALTH_{name}", value)
    return inbox


def _text_part(mail) -> str:
    return mail.message.get_body(("plain",)).get_content()


def test_files_beside_the_runs_are_reported_as_skipped(fleet):
    """The analysis runs the three simulated runs and lists the README, SOURCES.md and labels as skipped."""
    assert sorted(fleet.outcome.run_ids) == sorted(fleet.labels)
    assert fleet.outcome.skipped == NOT_RUNS


def test_a_run_crossing_midnight_finds_its_fleet_report(fleet, monkeypatch):
    """With a clock that moves a day on each reading, the fleet report returned is the one written."""
    days = (dt.date(2031, 1, 1) + dt.timedelta(days=i) for i in itertools.count())

    class Clock(dt.date):
        @classmethod
        def today(cls):
            return next(days)

    monkeypatch.setattr(analysis, "dt", SimpleNamespace(date=Clock))
    outcome = analyze_archive(fleet.archive, fleet.warehouse, fleet.reports)
    assert outcome.fleet_report == fleet.reports / "fleet" / "2031-01-01.html"
    assert outcome.fleet_report.is_file()


def test_the_nightly_run_rebuilds_the_fleet_and_mails_its_report(fleet, mail_settings, tmp_path):
    """The nightly schedule's run of analyze_batch (the asset selection and tags of its tick on 2026-12-01 when
    no model is stored yet), executed with the resources built from the environment: fleet tables counting
    every run on the day it started, the dated fleet report linking every run, and its mail received."""
    defs = build_definitions(fleet.archive, fleet.warehouse, fleet.reports, quiet_period_s=0)
    tick = build_schedule_context(scheduled_execution_time=dt.datetime(2026, 12, 1, 2, tzinfo=dt.UTC))
    request = nightly_requests(tick, WarehouseResource(path=str(tmp_path / "no-model-yet")))
    result = defs.resolve_job_def("analyze_batch").execute_in_process(
        instance=DagsterInstance.ephemeral(), tags=request.tags, asset_selection=request.asset_selection)
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {*fleet_tables(), "anomaly_model", "fleet_report", "fleet_report_mail", "published_warehouse"}
    assert {"fleet_daily", "fleet_weekly", "fleet_config_groups", "run_baselines"} <= materialized

    con = connect(fleet.warehouse)
    started = Counter(dt.date.fromisoformat(lab["first_ts"][:10]) for lab in fleet.labels.values())
    assert dict(con.execute("select day, runs from fleet_daily").fetchall()) == started
    assert sorted(r for (r,) in con.execute("select run_id from run_baselines").fetchall()) == sorted(fleet.labels)

    report = fleet.reports / "fleet" / "2026-12-01.html"
    links = {a.attrs["href"] for a in parse_html(report.read_text()).find("table", id_="all-runs-table").find_all("a")}
    assert links == {f"../runs/{rid}.html" for rid in fleet.labels}

    [mail] = mail_settings.wait()
    assert (mail.sender, mail.recipients) == ("nightly@test.local", ["rl-team@test.local", "oncall@test.local"])
    assert mail.message["Subject"] == "verl-health fleet report 2026-12-01"
    assert all(rid in _text_part(mail) for rid in fleet.labels)
    html = mail.message.get_body(("html",)).get_content()
    assert all(f"https://health.test.local/reports/runs/{rid}.html" in html for rid in fleet.labels)
    # the page's charts are SVG, which mail clients do not show: the mail carries them as inline PNG images
    assert "<svg" not in html and html.count('src="cid:') == 3
    assert [p.get_content_type() for p in mail.message.walk() if p.get_content_disposition() == "inline"] == [
        "image/png"] * 3


def test_analyze_mail_sends_the_fleet_report(fleet, mail_settings, capsys):
    """`verl-health analyze ARCHIVE --mail` mails the fleet report it printed, to the configured team,
    and names the files it skipped."""
    code = cli.main(["analyze", str(fleet.archive), "--warehouse", str(fleet.warehouse),
                     "--reports", str(fleet.reports), "--mail"])
    out = capsys.readouterr().out
    assert code == 0
    for name, why in NOT_RUNS.items():
        assert f"skipped {name}: {why}" in out
    printed = next(line.split(": ", 1)[1].strip() for line in out.splitlines() if line.startswith("fleet report:"))
    [mail] = mail_settings.wait()
    assert mail.recipients == ["rl-team@test.local", "oncall@test.local"]
    assert mail.message["Subject"] == f"verl-health fleet report {Path(printed).stem}"
    assert all(rid in _text_part(mail) for rid in fleet.labels)
