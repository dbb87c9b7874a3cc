"""error_templates: error and warning lines no rule names, mined across the fleet into one template each,
and the fleet report's "New signatures this week"."""

from __future__ import annotations

import os
import re
import time
from datetime import date, datetime
from pathlib import Path

import duckdb
import pytest

from pipeline import derive, lake
from pipeline.error_templates import new_signatures, unknown_templates_of_run
from pipeline.templates_miner import mine_templates

# The same fault printed by three runs with different numbers, addresses and paths; no rule names it.
LEASE = "{day} 10:06:00,000 ERROR shard {shard} of blob relay {addr} lost its lease on {path} (attempt {n})"
LEASE_TEMPLATE = "<*> ERROR shard <*> of blob relay <*> lost its lease on <*> (attempt <*>)"
RUNS = {
    "run_a": ("2026-11-25", LEASE.format(day="2026-11-25", shard=17, addr="10.0.3.7:29500",
                                         path="/scratch/job_1041/ckpt", n=3)),
    "run_b": ("2026-11-26", LEASE.format(day="2026-11-26", shard=4, addr="10.0.9.12:41233",
                                         path="/scratch/job_2207/ckpt", n=5)),
    "run_c": ("2026-11-28", LEASE.format(day="2026-11-28", shard=211, addr="192.168.1.40:6379",
                                         path="/data/u/run3/ckpt", n=2)),
    # a warning no rule names in more runs than the fault: errors are listed first
    "run_w1": ("2026-11-27", "2026-11-27 10:06:00,000 WARNING cache warm-up took 12 s on node-3"),
    "run_w2": ("2026-11-27", "2026-11-27 10:06:00,000 WARNING cache warm-up took 7 s on node-9"),
    "run_w3": ("2026-11-28", "2026-11-28 10:06:00,000 WARNING cache warm-up took 31 s on node-1"),
    "run_w4": ("2026-11-28", "2026-11-28 10:06:00,000 WARNING cache warm-up took 4 s on node-2"),
    # an old unknown fault (a month before the report) and a fault a rule names (CUDA out of memory)
    "run_old": ("2026-10-20", "2026-10-20 10:06:00,000 ERROR quorum of 5 mirrors missing for volume vol-3"),
    "run_oom": ("2026-11-27", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. "
                              "GPU 0 has a total capacity of 79.11 GiB"),
}


def _log(day: str, last_line: str) -> str:
    lines = [f"{day} 10:00:00,000 INFO trainer started"]
    lines += [f"{day} 10:0{s}:00,000 INFO step:{s} - actor/pg_loss:{0.1 * s:.3f} - timing_s/gen:{3.0 + s:.2f}"
              f" - timing_s/step:{10.0 + s:.2f}" for s in range(1, 6)]
    return "\n".join([*lines, last_line]) + "\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """The five runs ingested and derived, and error_templates mined over them; returns the warehouse."""
    from pipeline.ingest import discover_runs, ingest_run

    root = tmp_path_factory.mktemp("templates")
    archive, wh = root / "archive", root / "warehouse"
    archive.mkdir()
    for rid, (day, line) in RUNS.items():
        path = archive / f"{rid}.log"
        path.write_text(_log(day, line))
        stamp = time.mktime(time.strptime(f"{day} 11", "%Y-%m-%d %H"))
        os.utime(path, (stamp, stamp))
    found = discover_runs(archive, quiet_period_s=0)
    for entry in found.entries:
        ingest_run(entry, wh)
    derive.derive_run_tables(wh, [e.run_id for e in found.entries])
    derive.derive_fleet_table(wh, "error_templates")
    return wh


def _templates(wh: Path) -> dict[str, dict]:
    cur = duckdb.connect().execute(f"select * from {lake.table_source(wh, 'error_templates')}")
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def test_a_fault_printed_with_other_numbers_in_three_runs_is_one_template(fleet):
    templates = _templates(fleet)
    lease = [t for t in templates.values() if "lost its lease" in t["template"]]
    assert len(lease) == 1, [t["template"] for t in lease]
    t = lease[0]
    assert t["template"] == LEASE_TEMPLATE
    assert (t["n_runs"], t["n_lines"], t["known"]) == (3, 3, False)
    assert t["run_ids"] == ["run_a", "run_b", "run_c"]
    assert t["first_seen"] == datetime(2026, 11, 25, 10, 6)
    assert t["last_seen"] == datetime(2026, 11, 28, 10, 6)
    assert t["example"] == RUNS["run_a"][1]
    assert (t["example_run_id"], t["example_file"], t["example_line_no"]) == ("run_a", "run_a.log", 7)


def test_a_line_a_rule_names_is_known(fleet):
    oom = [t for t in _templates(fleet).values() if "CUDA out of memory" in t["template"]]
    assert len(oom) == 1 and oom[0]["known"] is True
    assert oom[0]["root_cause_of"] == ["run_oom"]


def test_new_signatures_are_the_unknown_templates_first_seen_in_the_week(fleet):
    new = new_signatures(fleet, date(2026, 11, 28))
    assert [(s["template"], s["n_runs"]) for s in new] == [
        (LEASE_TEMPLATE, 3), ("<*> WARNING cache warm-up took <*> s on node-<*>", 4)]
    # a week later the lease fault is no longer new; the old quorum fault never was in a week shown here
    assert new_signatures(fleet, date(2026, 12, 9)) == []
    assert [s["n_runs"] for s in new_signatures(fleet, date(2026, 10, 21))] == [1]


def test_a_run_whose_only_error_is_unknown_points_at_its_template(fleet):
    found = unknown_templates_of_run(fleet, "run_b")
    assert [(t["template"], t["n_runs"]) for t in found] == [(LEASE_TEMPLATE, 3)]
    assert unknown_templates_of_run(fleet, "run_oom") == []


def test_the_fleet_report_lists_the_new_signature(fleet, tmp_path):
    from pipeline.report.render import render_fleet_report

    html = render_fleet_report(fleet, tmp_path, date(2026, 11, 30)).read_text()
    section = html.split('id="new-signatures"', 1)[1].split("<h2", 1)[0]
    rows = re.findall(r'<tr class="signature" data-runs="(\d+)"><td class="mono">([^<]*)</td>', section)
    assert rows[0] == ("3", LEASE_TEMPLATE.replace("<", "&lt;").replace(">", "&gt;"))
    assert [n for n, _ in rows] == ["3", "4"]
    assert "quorum" not in section and "CUDA out of memory" not in section


def test_numbers_addresses_paths_and_ids_become_wildcards():
    lines = [
        "RelayError: worker 0x7f3a9c rank 3 lost 10.0.0.7:6379 reading /mnt/a/b.bin id 4f6c1d2e9a7b8c01",
        "RelayError: worker 0x1b rank 12 lost 192.168.0.2:80 reading /data/x/y/z.bin id 00aa11bb22cc33dd",
        "RelayError: worker 0xdeadbeef rank 0 lost 10.1.1.1:1 reading ~/scratch/q.bin id 9e8d7c6b5a493827",
    ]
    expected = "RelayError: worker <*> rank <*> lost <*> reading <*> id <*>"
    assert mine_templates(lines) == [expected] * 3


def test_different_faults_stay_apart_and_ray_repeat_notes_are_dropped():
    lines = [
        "Failed to connect to the metrics exporter at port 8080",
        "Failed to connect to the metrics exporter at port 9090 [repeated 7x across cluster]",
        "Checkpoint upload to bucket refused: quota exceeded for project p-17",
    ]
    got = mine_templates(lines)
    assert got[0] == got[1] == "Failed to connect to the metrics exporter at port <*>"
    assert got[2] == "Checkpoint upload to bucket refused: quota exceeded for project p-<*>"


def test_a_warehouse_without_run_events_has_no_templates(tmp_path):
    """Fleet tables only (as bench_report builds them): no lines, so no template and no new signature."""
    from report_fixtures import RunSpec, write_run

    write_run(tmp_path, RunSpec(run_id="only-summary", failure_class="cuda_oom", n_steps=5, with_logs=False),
              only=("runs", "run_summary"))
    assert derive.derive_fleet_table(tmp_path, "error_templates") == 0
    assert new_signatures(tmp_path, date(2026, 11, 30)) == []
    assert unknown_templates_of_run(tmp_path, "only-summary") == []


def _unknown_section(html: str) -> str | None:
    if 'id="unknown-signatures"' not in html:
        return None
    return html.split('id="unknown-signatures"', 1)[1].split("</div>", 1)[0]


def test_the_run_report_of_a_run_whose_only_error_is_unknown_shows_its_signature(fleet, tmp_path):
    """run_b's one error (the lease fault) has no rule: its report shows the template, seen in three runs,
    and points at the fleet's "New signatures"; the OOM run (a rule names it) and a run with only an unknown
    warning show none."""
    from pipeline.report.render import render_run_report

    section = _unknown_section(render_run_report(fleet, "run_b", tmp_path).read_text())
    rows = re.findall(r'<tr class="signature[^"]*" data-runs="(\d+)" data-kind="(\w+)"><td class="logtext">([^<]*)',
                      section)
    assert [(n, kind, text.strip()) for n, kind, text in rows] == [
        ("3", "error", LEASE_TEMPLATE.replace("<", "&lt;").replace(">", "&gt;"))]
    assert 'href="../fleet/latest.html#new-signatures"' in section
    for run_id in ("run_oom", "run_w1"):
        assert _unknown_section(render_run_report(fleet, run_id, tmp_path).read_text()) is None


def test_the_fleet_report_navigation_and_text_list_new_signatures(fleet, tmp_path):
    from pipeline.report.render import render_fleet_report

    page = render_fleet_report(fleet, tmp_path, date(2026, 11, 30))
    nav = page.read_text().split('<nav class="toc">', 1)[1].split("</nav>", 1)[0]
    assert '<a href="#new-signatures">' in nav
    text = page.with_suffix(".txt").read_text()
    section = text.split("New signatures this week", 1)[1].split("All runs, newest first", 1)[0]
    assert f"{LEASE_TEMPLATE}: 3 runs, 3 lines" in section
    assert "WARNING cache warm-up took <*> s on node-<*>: 4 runs, 4 lines" in section
    assert "quorum" not in section


# Crafted messages holding each kind of part the masks replace, and messages lacking each mask's needed texts
CRAFTED = [
    "actor 6f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f died at 0x7f3a9c and 2026-11-25T10:06:00.123+08:00",
    "worker 1a2b3c4d5e6f7a8b on 10.0.3.7:29500 and [fe80::1:2:3]:8080 read https://hf.co/x/y?z=1",
    "checkpoint /scratch/job_1041/ckpt and data/train/part-3 and ~/a/b saved at 11-25 10:06:00,5",
    "rank3 E0718 lost 12.5e-3 of 4,096 tokens after 00:00:07",
    "no id, no address, no path and no number here",
    "dotted.name only and a colon: here but no digits",
]


def test_masks_that_skip_a_message_mask_every_message_as_drain3s_own_regex_masks(real_logs_dir):
    """A mask passes a message on unread when it holds none of the texts every match needs: the masks leave
    every line of the real logs, and crafted lines with each variable part, as Drain3's own regex mask of the
    same patterns does, one mask and the whole chain; the templates mined are the same."""
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction

    from pipeline import templates_miner
    from pipeline.templates_miner import MASKS, GuardedMask, _clean

    logs = sorted(real_logs_dir.glob("*.log"))
    if not logs:
        pytest.skip(f"no real logs in {real_logs_dir}")
    lines = sorted({_clean(line) for log in logs for line in log.read_text(errors="replace").splitlines()}
                   | set(CRAFTED))
    assert len(lines) > 40_000
    guarded = [GuardedMask(pattern, needs) for pattern, needs in MASKS]
    plain = [MaskingInstruction(pattern, "*") for pattern, _ in MASKS]
    skipped = 0
    for g, p in zip(guarded, plain, strict=True):
        for line in lines:
            if g.skips(line):
                skipped += 1
                assert p.regex.search(line) is None, (p.pattern, line)
    assert skipped > len(lines)  # the masks skip something: else nothing here was tested
    chain_g, chain_p = list(CRAFTED), list(CRAFTED)
    for g, p in zip(guarded, plain, strict=True):
        chain_g = [g.mask(c, "<", ">") for c in chain_g]
        chain_p = [p.mask(c, "<", ">") for c in chain_p]
    assert chain_g == chain_p and all(c != m for c, m in zip(chain_g, CRAFTED, strict=True) if "no " not in m)
    config = templates_miner._config()
    config.masking_instructions = plain
    own = TemplateMiner(config=config)
    messages = [line for line in lines if re.search(r"Error|error|WARN|Warning", line)][:3000]
    ids = [own.add_log_message(m)["cluster_id"] for m in messages]
    final = {cid: templates_miner._tidy(c.get_template()) for cid, c in own.drain.id_to_cluster.items()}
    assert mine_templates(messages) == [final[cid] for cid in ids]
