"""Run reports rendered as a batch (pipeline/report/batch.py): each table read once for the whole batch and
split per run, each report still showing its own run and its comparison with earlier runs outside the batch."""

from __future__ import annotations

import re
from datetime import datetime

import pyarrow as pa
from report_fixtures import ROOT_CAUSES, RunSpec, build_warehouse, every_class_specs, parse_html, write_run

from pipeline import lake
from pipeline.report.batch import render_run_reports
from pipeline.report.labels import LINE_KINDS


def _page(path):
    return parse_html(path.read_text(encoding="utf-8"))


def _val_metrics(values: dict[int, float]) -> pa.Table:
    steps = sorted(values)
    n = len(steps)
    # a training metric beside each validation one: the batch keeps only what the report reads
    return pa.table({"step": pa.array(steps * 2, pa.int64()),
                     "key": ["val-core/openai/gsm8k/acc/mean@1"] * n + ["actor/entropy"] * n,
                     "value": [values[s] for s in steps] * 2, "source": ["console"] * 2 * n,
                     "segment": pa.array([0] * 2 * n, pa.int32())})


def test_each_report_of_a_batch_shows_its_own_run(tmp_path):
    """Every failure class in one batch: each page names its run's class, last step and root-cause line
    (the line the fixture wrote: after the two header lines, the steps and four traceback lines)."""
    specs = every_class_specs()
    wh = build_warehouse(tmp_path / "wh", specs)
    paths = render_run_reports(wh, [s.run_id for s in specs], tmp_path / "rep", workers=1)
    assert [p.stem for p in paths] == [s.run_id for s in specs]
    for spec, path in zip(specs, paths, strict=True):
        doc = _page(path)
        assert doc.find("section", id_="verdict").attrs["data-failure-class"] == spec.failure_class
        assert doc.find(id_="last-step").text().split()[0] == str(spec.n_steps)
        if spec.failure_class in ROOT_CAUSES and not spec.hostile:
            line_no = 2 + spec.n_steps + 4
            assert doc.find(id_="root-cause-location").text() == f"train.log:{line_no}"
            lines = doc.find("pre", id_="root-cause-context").find_all("span", cls="ln")
            assert [n.attrs["data-line"] for n in lines if "cause" in n.classes] == [str(line_no)]
            numbers = [int(n.attrs["data-line"]) for n in lines]
            assert numbers[0] < line_no < numbers[-1], "the log lines around the cause, read from log_lines"


def test_a_batch_compares_its_run_with_earlier_runs_outside_it(tmp_path):
    """A batch of one run whose config group's earlier runs are not in it: MFU 0.5 against 0.2 and 0.6 (median
    0.4, ×1.25); validation accuracy first 0.6, last 0.2, best 0.6 against the earlier runs' last values 0.3 and
    0.5 (median 0.4). The run on 4 GPUs per node (another config group, MFU 0.9) is not a peer."""
    fleet = {  # run: MFU, end, validation accuracy by step, GPUs per node
        "early": (0.2, datetime(2026, 11, 20), {10: 0.3}, 8),
        "later": (0.6, datetime(2026, 11, 21), {10: 0.1, 20: 0.5}, 8),
        "wider": (0.9, datetime(2026, 11, 22), {10: 0.9}, 4),
        "latest": (0.5, datetime(2026, 11, 27), {10: 0.6, 20: 0.2}, 8),
    }
    wh = tmp_path / "wh"
    for rid, (mfu, ended, accuracy, gpus) in fleet.items():
        write_run(wh, RunSpec(run_id=rid, mfu_actor=mfu, ended_at=ended, n_gpus_per_node=gpus))
        lake.write_run_table(wh, "step_metrics", rid, _val_metrics(accuracy))
    build_warehouse(wh, [])
    (path,) = render_run_reports(wh, ["latest"], tmp_path / "rep", workers=1)
    doc = _page(path)
    mfu = doc.find("table", id_="verl-signals").find("tr", data_key="perf/mfu/actor").find_all("td")
    assert [td.text().split(" (")[0] for td in mfu[1:4]] == ["0.5", "0.4", "×1.25"]
    val = doc.find("table", id_="validation").find("tr", data_source="openai/gsm8k").find_all("td")
    assert [td.text().split(" (")[0] for td in val[2:6]] == ["0.6", "0.2", "0.6", "0.4"]


def test_a_batch_ends_with_its_block(tmp_path):
    """After a batch of warehouse a, a report of the same run id in warehouse b (run summary only, completed)
    reads b: nothing of a's CUDA OOM and its events."""
    write_run(tmp_path / "a", RunSpec(run_id="same-id", failure_class="cuda_oom", n_steps=12, seed=1))
    write_run(tmp_path / "b", RunSpec(run_id="same-id", failure_class="completed", n_steps=12, seed=1,
                                      with_logs=False), only=("runs", "run_summary"))
    (first,) = render_run_reports(tmp_path / "a", ["same-id"], tmp_path / "ra", workers=1)
    (second,) = render_run_reports(tmp_path / "b", ["same-id"], tmp_path / "rb", workers=1)
    assert 'data-failure-class="cuda_oom"' in first.read_text() and 'id="events"' in first.read_text()
    text = second.read_text()
    assert 'data-failure-class="completed"' in text and 'id="events"' not in text


def _events(run_id: str, n: int) -> pa.Table:
    return pa.table({"file": [f"{run_id}.log"] * n, "line_no": pa.array(range(1, n + 1), pa.int64()),
                     "event_class": ["python_exception"] * n, "component": pa.nulls(n, pa.string()),
                     "message": [f"{run_id} event {k}" for k in range(1, n + 1)],
                     "step": pa.array([5] * n, pa.int64()), "phase": pa.nulls(n, pa.string()),
                     "segment": pa.array([0] * n, pa.int32())})


def _log_lines(files: dict[str, list[str]]) -> pa.Table:
    """One line per kind listed for each file."""
    names = [f for f, kinds in files.items() for _ in kinds]
    kinds = [k for ks in files.values() for k in ks]
    m = len(names)
    return pa.table({"file": names, "line_no": pa.array(range(1, m + 1), pa.int64()), "text": ["x"] * m,
                     "kind": kinds, "component": pa.nulls(m, pa.string()), "pid": pa.nulls(m, pa.int64()),
                     "segment": pa.array([0] * m, pa.int32()), "step": pa.array([1] * m, pa.int64()),
                     "phase_hint": pa.nulls(m, pa.string()), "ts": pa.nulls(m, pa.timestamp("us"))})


def test_a_batch_keeps_each_runs_own_last_events_and_largest_files(tmp_path):
    """Read for the whole batch at once, each run still lists its own last 12 events (alpha's 20 events: 9-20,
    beta's 15: 4-15) and its own 50 largest files (alpha's 60 files of 1-60 lines: 60 down to 11 lines, one
    error each; beta's 3 files), its lines by kind and its files that tie in the order of their names."""
    wh = tmp_path / "wh"
    for rid in ("alpha", "beta"):
        write_run(wh, RunSpec(run_id=rid, failure_class="cuda_oom", n_steps=12))
    build_warehouse(wh, [])
    lake.write_run_table(wh, "run_events", "alpha", _events("alpha", 20))
    lake.write_run_table(wh, "run_events", "beta", _events("beta", 15))
    lake.write_run_table(wh, "log_lines", "alpha", _log_lines(
        {f"w{i:02d}.log": ["error"] + ["other"] * (i - 1) for i in range(1, 61)}))
    lake.write_run_table(wh, "log_lines", "beta", _log_lines(
        {"a.log": ["error", "config", "warning", "progress"], "b.log": ["config", "error", "other", "memory",
         "step_metrics"], "c.log": ["step_metrics", "warning", "progress", "memory", "other"]}))
    alpha, beta = (_page(p) for p in render_run_reports(wh, ["alpha", "beta"], tmp_path / "rep", workers=1))

    def events(doc):
        return [tr.find_all("td")[-1].text() for tr in doc.find("table", id_="events").find_all("tr")[1:]]

    def cells(doc, table):
        return [[td.text() for td in tr.find_all("td")] for tr in doc.find("table", id_=table).find_all("tr")[1:]]

    assert events(alpha) == [f"alpha event {k}" for k in range(9, 21)]
    assert events(beta) == [f"beta event {k}" for k in range(4, 16)]
    assert cells(alpha, "sources") == [[f"w{i:02d}.log", str(i), "1", str(i - 1)] for i in range(60, 10, -1)]
    assert cells(beta, "sources") == [["b.log", "5", "1", "1"], ["c.log", "5", "0", "1"], ["a.log", "4", "1", "0"]]
    kinds = ("config", "error", "memory", "other", "progress", "step_metrics", "warning")
    assert cells(beta, "lines-by-kind") == [[LINE_KINDS[k], "2"] for k in kinds]


def test_each_report_of_a_batch_is_the_one_rendered_alone(tmp_path):
    """A report rendered in a batch of every failure class is the page that run gets rendered on its own
    (but for the time it was generated): nothing of another run of the batch leaks into it."""
    specs = every_class_specs()
    wh = build_warehouse(tmp_path / "wh", specs)
    batch = render_run_reports(wh, [s.run_id for s in specs], tmp_path / "batch", workers=1)
    for spec, path in zip(specs, batch, strict=True):
        (alone,) = render_run_reports(wh, [spec.run_id], tmp_path / "alone", workers=1)
        assert _unstamped(path) == _unstamped(alone), spec.run_id


def _unstamped(path) -> str:
    return re.sub(r"Generated by verl-health on [^<]* from", "Generated from", path.read_text(encoding="utf-8"))


def test_a_batch_spread_over_worker_processes_gives_the_pages_one_process_gives(tmp_path, monkeypatch):
    """This process and a spawned worker render alternate chunks: every run gets its own page, in the batch's order."""
    from pipeline.report import batch

    specs = every_class_specs()
    wh = build_warehouse(tmp_path / "wh", specs)
    monkeypatch.setattr(batch, "MIN_RUNS_FOR_POOL", 2)
    monkeypatch.setattr(batch, "MAX_BATCH", 2)
    ids = [s.run_id for s in specs]
    spread = render_run_reports(wh, ids, tmp_path / "spread", workers=2)
    alone = render_run_reports(wh, ids, tmp_path / "alone", workers=1)
    assert len(ids) >= 4 and [p.stem for p in spread] == ids
    for a, b in zip(spread, alone, strict=True):
        assert _unstamped(a) == _unstamped(b), a.stem
