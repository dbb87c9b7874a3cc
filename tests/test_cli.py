"""The `verl-health` command: the installed console script runs the demo; analyze is run in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from operate_support import set_age, write_run
from report_fixtures import parse_html

from lab.simulate import simulate_fleet
from pipeline.cli import main

VERL_HEALTH = Path(sys.executable).parent / "verl-health"


def test_demo_simulates_analyses_and_writes_both_reports(tmp_path):
    """The installed console script runs the demo: simulate, analyse, both kinds of report."""
    proc = subprocess.run(
        [str(VERL_HEALTH), "demo", "--data", str(tmp_path / "data"), "--reports", str(tmp_path / "reports"),
         "--runs", "2", "--seed", "3"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    labels = json.loads((tmp_path / "data" / "labels.json").read_text())
    assert len(labels["runs"]) == 2
    for run_id in labels["runs"]:
        assert (tmp_path / "reports" / "runs" / f"{run_id}.html").is_file()
    assert (tmp_path / "reports" / "fleet" / "latest.html").is_file()
    assert "analysed 2 runs" in proc.stdout and "fleet report:" in proc.stdout
    # how the runs ended, per outcome, adding up to the runs analysed
    outcomes = next(ln for ln in proc.stdout.splitlines() if ln.startswith("outcomes:"))
    assert sum(int(part.split()[0]) for part in outcomes.removeprefix("outcomes:").split(", ")) == 2
    assert "writing the fleet report ..." in proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr


def test_catalog_opens_from_another_folder(tmp_path, monkeypatch):
    """The warehouse built with relative paths answers queries from wherever the duckdb shell starts."""
    monkeypatch.chdir(tmp_path)
    simulate_fleet(Path("sim"), runs=2, seed=5)
    assert main(["analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep"]) == 0
    query = "import duckdb; print(duckdb.connect('warehouse.duckdb').execute('select count(*) from run_summary').fetchone()[0])"
    out = subprocess.run([sys.executable, "-c", query], cwd=tmp_path / "wh", check=True, capture_output=True,
                         text=True)
    assert out.stdout.strip() == "2"


def test_analyze_refuses_a_missing_archive(tmp_path, capsys):
    """An archive that is not a folder is refused with exit code 2."""
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_analyze_one_finished_run(tmp_path, monkeypatch, capsys):
    """`analyze --run PATH` analyses that run alone and prints its verdict; an unknown run_id is refused."""
    monkeypatch.chdir(tmp_path)
    labels = simulate_fleet(Path("sim"), runs=2, seed=8)
    run_id, lab = sorted(labels["runs"].items())[0]
    code = main(["analyze", "--run", str(tmp_path / "sim" / "archive" / lab["entry"]),
                 "--warehouse", "wh", "--reports", "rep"])
    printed = capsys.readouterr()
    assert code == 0
    # the run's report banner in plain words, then where the report is; what it was doing went to stderr
    report = Path("rep") / "runs" / f"{run_id}.html"
    banner = parse_html((tmp_path / report).read_text(encoding="utf-8")).find("section", id_="verdict")
    first = printed.out.splitlines()[0]
    assert first == f"{run_id}: {banner.find('p', cls='sentence').text().rstrip('.')} -> {report}"
    assert f" {lab['last_step']} " in first and lab["failure_class"] not in first
    assert "reading and diagnosing 1 run ..." in printed.err
    assert not (tmp_path / "rep" / "runs" / f"{sorted(labels['runs'])[1]}.html").exists()

    assert main(["analyze", "sim/archive", "--run", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err


def test_analyze_one_run_refuses_what_it_cannot_do(tmp_path, monkeypatch, capsys):
    """`--run` into an s3:// warehouse is refused before anything is written."""
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "run-x.log"
    log.write_text("step:1 - a:1\n")
    assert main(["analyze", "--run", str(log), "--warehouse", "s3://bucket/wh"]) == 2
    assert "local warehouse" in capsys.readouterr().err
    assert not (tmp_path / "s3:").exists()


def test_cli_runs_are_recorded_in_the_dagster_instance(tmp_path, monkeypatch, capsys):
    """With DAGSTER_HOME set, `analyze` on a fleet and then `analyze --run` on one more run leave every run_id
    partition of every per-run asset materialised in that instance (what `make ui` shows)."""
    from dagster import AssetKey, DagsterInstance

    monkeypatch.chdir(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    labels = simulate_fleet(Path("sim"), runs=3, seed=8)
    later_id, later = sorted(labels["runs"].items())[-1]
    parked = tmp_path / "later"
    parked.mkdir()
    (tmp_path / "sim" / "archive" / later["entry"]).rename(parked / later["entry"])
    assert main(["analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep"]) == 0
    assert main(["analyze", "--run", str(parked / later["entry"]), "--warehouse", "wh", "--reports", "rep"]) == 0
    capsys.readouterr()
    per_run = ("runs", "log_lines", "step_metrics", "step_phases", "step_health", "run_events", "run_summary",
               "config_findings", "run_advice", "run_samples", "step_anomalies", "run_report")
    with DagsterInstance.from_config(str(home)) as instance:
        for asset in per_run:
            done = instance.get_materialized_partitions(AssetKey(asset))
            assert done == set(labels["runs"]), (asset, done)


def test_analyze_selects_runs_by_id_glob_and_by_last_activity(tmp_path, monkeypatch, capsys):
    """`--include` keeps the run ids matching a glob; `--since`/`--until` the runs last active in those days."""
    import datetime as dt
    import os

    monkeypatch.chdir(tmp_path)
    labels = simulate_fleet(Path("sim"), runs=3, seed=8)
    (a, la), (b, lb), (c, lc) = sorted(labels["runs"].items())
    for entry, day in ((la["entry"], dt.datetime(2026, 1, 10)), (lb["entry"], dt.datetime(2026, 2, 10)),
                       (lc["entry"], dt.datetime(2026, 3, 10))):
        path = tmp_path / "sim" / "archive" / entry
        for p in [path, *path.rglob("*")]:
            os.utime(p, (day.timestamp(), day.timestamp()))
    assert main(["analyze", "sim/archive", "--warehouse", "w1", "--reports", "r1", "--include", b]) == 0
    assert sorted(p.stem for p in (tmp_path / "r1" / "runs").glob("*.html")) == [b]
    assert main(["analyze", "sim/archive", "--warehouse", "w2", "--reports", "r2",
                 "--since", "2026-02-01", "--until", "2026-02-28"]) == 0
    assert sorted(p.stem for p in (tmp_path / "r2" / "runs").glob("*.html")) == [b]
    assert main(["analyze", "sim/archive", "--warehouse", "w3", "--reports", "r3", "--since", "2026-02-01"]) == 0
    assert sorted(p.stem for p in (tmp_path / "r3" / "runs").glob("*.html")) == [b, c]
    capsys.readouterr()


def test_a_run_without_a_step_analyses_into_a_fresh_warehouse(tmp_path, monkeypatch, capsys):
    """A run that died before its first step, alone in a fresh warehouse: no anomaly model to fit, said so,
    and its verdict and report as for any run; the next run with steps gets the model fitted."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    log = tmp_path / "archive" / "died-early.log"
    log.parent.mkdir()
    log.write_text("2026-11-20 10:00:00 INFO starting verl trainer\nTraceback (most recent call last):\n"
                   '  File "main.py", line 3, in <module>\nRuntimeError: CUDA error: out of memory\n')
    set_age(log, 3600)
    assert main(["analyze", "--run", str(log), "--warehouse", "wh", "--reports", "rep"]) == 0
    out = capsys.readouterr().out
    # the log's one error, no step line, one clock: no time to say
    assert out.splitlines()[0] == "died-early: CUDA OOM in startup at step 0 -> rep/runs/died-early.html"
    assert "anomaly model: no model fitted: the warehouse has no training step" in out
    assert (tmp_path / "rep" / "runs" / "died-early.html").is_file()
    assert not (tmp_path / "wh" / "models").exists()

    later = write_run(tmp_path / "archive", "grpo-later", steps=3)
    assert main(["analyze", "--run", str(later), "--warehouse", "wh", "--reports", "rep"]) == 0
    out = capsys.readouterr().out
    assert "anomaly model:" not in out
    assert (tmp_path / "wh" / "models" / "anomaly_model.json").is_file()


def test_analyze_without_a_dagster_record(tmp_path, monkeypatch, capsys):
    """`--no-record` keeps Dagster's record in memory: the same verdicts and reports, no Dagster home written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    labels = simulate_fleet(Path("sim"), runs=2, seed=8)
    assert main(["analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep", "--no-record"]) == 0
    run_id, lab = sorted(labels["runs"].items())[0]
    assert main(["analyze", "--run", str(tmp_path / "sim" / "archive" / lab["entry"]), "--force", "--no-record",
                 "--warehouse", "wh", "--reports", "rep"]) == 0
    assert f"{run_id}: " in capsys.readouterr().out
    assert sorted(p.stem for p in (tmp_path / "rep" / "runs").glob("*.html")) == sorted(labels["runs"])
    assert not (tmp_path / "dagster").exists()


def test_no_run_to_analyse_is_an_error_that_writes_and_mails_nothing(tmp_path, monkeypatch, capsys, smtp_server):
    """An empty archive, or an --include/--since that keeps none of its runs, exits non-zero saying what was
    looked for, and leaves no fleet page and no mail: a nightly job whose archive mount went missing must not
    report good news."""
    port, inbox = smtp_server
    for name, value in {"SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_SECURITY": "none",
                        "MAIL_FROM": "nightly@test.local", "MAIL_TO": "rl-team@test.local"}.items():
        monkeypatch.setenv(f"VERL_HEALTH_{name}", value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert main(["analyze", "empty", "--warehouse", "wh", "--reports", "rep", "--mail"]) == 1
    err = capsys.readouterr().err
    assert "no run to analyse" in err and "runs in empty" in err and "0 run entries" in err
    labels = simulate_fleet(Path("sim"), runs=2, seed=8)
    assert main(["analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep", "--mail",
                 "--include", "grpo-nothing-*"]) == 1
    err = capsys.readouterr().err
    assert "run_id matching 'grpo-nothing-*'" in err and f"{len(labels['runs'])} run entries" in err
    assert main(["analyze", "sim/archive", "--warehouse", "wh", "--reports", "rep", "--since", "2999-01-01"]) == 1
    assert "last active on or after 2999-01-01" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()
    assert not (tmp_path / "wh").exists()
    assert inbox.mails == []
