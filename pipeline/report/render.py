"""Render the run and fleet reports from one Jinja2 environment with autoescaping on.

The fleet report is written twice from the same context: as HTML, and as plain text for the mail's
text part (`fleet/<day>.txt`), so the two can never disagree. Its mail's HTML is the same page with PNG
charts instead of SVG (mail clients show no SVG), rendered only for a run that mails the report: then from the
same data as the page (`fleet/<day>.mail.html`), so the mail shows what it attaches.
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import date
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from pipeline import lake
from pipeline.error_templates import NEW_DAYS, new_signatures
from pipeline.report.advice import sources
from pipeline.report.fleet_data import load_fleet
from pipeline.report.fleet_page import fleet_context
from pipeline.report.formats import fmt_duration, fmt_num, fmt_pct, fmt_ratio, fmt_time
from pipeline.report.labels import (
    ANOMALY_LABELS,
    CLASS_LABELS,
    COMPLETENESS_LABELS,
    CONFIG_LABELS,
    LINE_KINDS,
    ROLE_LABELS,
    TRAINING_LABELS,
    event_label,
    outcome_label,
)
from pipeline.report.run_data import RunReportData, load_run
from pipeline.report.run_page import run_context

TEMPLATES = Path(__file__).parent / "templates"
# the day a fleet page is for, as its heading records it
REPORT_DAY_RE = re.compile(r'data-report-day="(\d{4}-\d\d-\d\d)"')


def run_href(run_id: str, prefix: str = "../runs/") -> str | None:
    """Relative link to a run report inside the reports folder, or None for an id that is not valid."""
    try:
        return f"{prefix}{lake.check_run_id(str(run_id))}.html"
    except ValueError:
        return None


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(["html", "html.j2"], default_for_string=True, default=False),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(duration=fmt_duration, num=fmt_num, pct=fmt_pct, ratio=fmt_ratio, time=fmt_time)
    env.globals.update(
        class_label=lambda c: CLASS_LABELS.get(c or "unknown", str(c)), run_href=run_href, sources=sources,
        training_label=lambda o: TRAINING_LABELS.get(o, str(o)),
        config_label=lambda k: CONFIG_LABELS.get(k, k), completeness_label=lambda k: COMPLETENESS_LABELS.get(k, k),
        line_kind=lambda k: LINE_KINDS.get(k, k), anomaly_label=lambda c: ANOMALY_LABELS.get(c, c),
        event_label=event_label, role_label=lambda r: ROLE_LABELS.get(r, r), outcome_label=outcome_label,
    )
    return env


ENV = _environment()


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def render_run_report(warehouse: str | Path, run_id: str, reports_dir: str | Path) -> Path:
    """Write `reports_dir/runs/<run_id>.html` for one run and return its path."""
    return write_run_report(load_run(warehouse, run_id), reports_dir)


def write_run_report(data: RunReportData, reports_dir: str | Path) -> Path:
    """Write `reports_dir/runs/<run_id>.html` from a run's report data and return its path."""
    html = ENV.get_template("run.html.j2").render(**run_context(data))
    return _write(run_report_path(reports_dir, data.run_id), html)


def run_report_path(reports_dir: str | Path, run_id: str) -> Path:
    """Where the report of `run_id` is: `reports_dir/runs/<run_id>.html`."""
    return Path(reports_dir) / "runs" / f"{lake.check_run_id(run_id)}.html"


def text_path(report: Path) -> Path:
    """Where the plain-text rendering of a fleet report is: beside it, ending in .txt."""
    return report.with_suffix(".txt")


def _fleet_contexts(warehouse: str | Path, day: date, pngs: tuple[bool, ...]) -> list[dict]:
    """The fleet report's template context for each chart format of `pngs`, all from one load of the warehouse."""
    data = load_fleet(warehouse, day)
    contexts = [fleet_context(data, png) for png in pngs]
    shared = {"new_signatures": new_signatures(warehouse, contexts[0]["data_day"]), "new_signature_days": NEW_DAYS,
              "generated": contexts[0]["generated"]}
    return [context | shared for context in contexts]


def mail_page_path(reports_dir: str | Path, day: date) -> Path:
    """Where the page that the mail of `day`'s fleet report shows is kept (written with the report)."""
    return Path(reports_dir) / "fleet" / f"{day.isoformat()}.mail.html"


def render_fleet_report(warehouse: str | Path, reports_dir: str | Path, day: date, mail_page: bool = False) -> Path:
    """Write `reports_dir/fleet/<day>.html` and `fleet/latest.html` (each with its .txt); return the dated file.

    With `mail_page`, also the page its mail shows (`mail_page_path`, PNG charts), from the same data; without,
    a mail page left by an earlier rendering of the day is removed, so no mail shows another page than it attaches.
    """
    contexts = _fleet_contexts(warehouse, day, (False, True) if mail_page else (False,))
    html = ENV.get_template("fleet.html.j2").render(**contexts[0])
    text = ENV.get_template("fleet.txt.j2").render(**contexts[0])
    folder = Path(reports_dir) / "fleet"
    # removed first: if writing the new one fails, a mail renders its page from the warehouse, not the old data
    mail_page_path(reports_dir, day).unlink(missing_ok=True)
    for name in (day.isoformat(), "latest"):
        _write(folder / f"{name}.txt", text)
        _write(folder / f"{name}.html", html)
    if mail_page:
        _write(mail_page_path(reports_dir, day), ENV.get_template("fleet.html.j2").render(**contexts[1]))
    return folder / f"{day.isoformat()}.html"


def fleet_report_day(report: Path) -> date | None:
    """The day a written fleet report is for; None for a page that does not record it."""
    found = REPORT_DAY_RE.search(report.read_text(encoding="utf-8"))
    return date.fromisoformat(found[1]) if found else None


def fleet_mail_page(warehouse: str | Path, day: date) -> str:
    """The fleet report's HTML for `day` with its charts as PNG data URIs, rendered now: what a mail shows when
    its report was written without one (see mail.py)."""
    return ENV.get_template("fleet.html.j2").render(**_fleet_contexts(warehouse, day, (True,))[0])
