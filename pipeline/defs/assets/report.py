"""Report layer: run reports, the fleet report and the mail that carries it."""

import datetime as dt

from dagster import (
    AssetExecutionContext,
    BackfillPolicy,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from pipeline import lake, tables
from pipeline.defs.partitions import run_partitions
from pipeline.defs.resources import ReportsResource, SmtpResource, WarehouseResource
from pipeline.isolation import isolated_runs
from pipeline.report import build_fleet_mail, render_fleet_report, send_mail
from pipeline.report.batch import render_run_reports
from pipeline.report.render import fleet_mail_page, fleet_report_day, mail_page_path, run_report_path

DAY_TAG = "verl-health/day"
# A Dagster run that mails the fleet report (the nightly job, `analyze --mail`) carries this tag set to "true":
# its fleet_report then also writes the page the mail shows, from the same data as the page it attaches
MAIL_TAG = "verl-health/mail"
# A report reads the warehouse as a whole: a run's page its rows of the per-run tables and the fleet's
# baselines and error templates, the fleet page the fleet tables and the runs' summaries and anomalies. Both
# depend on every table of the registry, so every job that renders one refreshes the tables it reads.
REPORT_READS = tables.names()


def report_day(context: AssetExecutionContext) -> dt.date:
    """The day the fleet report is for: the nightly schedule's tick (in its timezone), else today."""
    day = context.run.tags.get(DAY_TAG)
    return dt.date.fromisoformat(day) if day else dt.date.today()


@asset(
    deps=REPORT_READS,
    partitions_def=run_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    group_name="report",
)
def run_report(context: AssetExecutionContext, warehouse: WarehouseResource,
               reports: ReportsResource) -> MaterializeResult:
    """HTML health report of each run: verdict, root cause and advice, phases, curves, anomalies."""
    run_ids = list(context.partition_keys)
    rendered, done = isolated_runs(warehouse.root, "run_report", run_ids,
                                   lambda ids: render_run_reports(warehouse.root, ids, reports.root), context.log)
    for run_id in set(run_ids) - set(done):  # an older report of the run would pass for this analysis
        run_report_path(reports.root, run_id).unlink(missing_ok=True)
    paths = [p for batch in rendered for p in batch]
    return MaterializeResult(
        metadata={
            "reports": len(paths),
            "failed_runs": len(context.partition_keys) - len(paths),
            "path": MetadataValue.path(str(paths[0].parent)) if paths else MetadataValue.text("none"),
            "bytes": sum(p.stat().st_size for p in paths),
        }
    )


@asset(
    deps=REPORT_READS,
    group_name="report",
)
def fleet_report(context: AssetExecutionContext, warehouse: WarehouseResource, reports: ReportsResource,
                 smtp: SmtpResource) -> MaterializeResult:
    """The fleet's morning page: runs needing attention, failures by class, phases by config, trends."""
    mail_page = smtp.enabled and context.run.tags.get(MAIL_TAG, "").lower() == "true"
    path = render_fleet_report(warehouse.root, reports.root, report_day(context), mail_page=mail_page)
    return MaterializeResult(
        metadata={"path": MetadataValue.path(str(path)), "bytes": path.stat().st_size, "mail_page": mail_page}
    )


@asset(deps=["fleet_report"], group_name="report")
def fleet_report_mail(context: AssetExecutionContext, warehouse: WarehouseResource, reports: ReportsResource,
                      smtp: SmtpResource) -> MaterializeResult:
    """The fleet report mailed to the team: HTML with inline PNG charts, a text part, the report attached."""
    report_path = reports.root / "fleet" / "latest.html"
    if not smtp.enabled:
        context.log.info("mail not configured (no SMTP host or recipients); nothing sent")
        return MaterializeResult(metadata={"sent": False, "reason": "mail not configured"})
    if not lake.has_a_run(warehouse.root, "run_summary"):
        # an archive mount gone missing leaves an empty warehouse: its page would read as good news
        raise Failure(f"no run in the warehouse {warehouse.root}: the fleet report is not mailed")
    # the day of the report it mails, which a mail sent on its own (a re-send, no day tag) does not know
    day = fleet_report_day(report_path) or report_day(context)
    stored = mail_page_path(reports.root, day)  # written with the report when its run mails it
    message = build_fleet_mail(
        report_path,
        sender=smtp.sender,
        recipients=smtp.recipients,
        subject=f"verl-health fleet report {day.isoformat()}",
        report_url=f"{smtp.reports_url.rstrip('/')}/fleet/{report_path.name}" if smtp.reports_url else None,
        mail_page=stored.read_text(encoding="utf-8") if stored.is_file() else fleet_mail_page(warehouse.root, day),
    )
    send_mail(message, smtp.settings())
    return MaterializeResult(
        metadata={"sent": True, "recipients": len(smtp.recipients), "subject": message["Subject"]}
    )
