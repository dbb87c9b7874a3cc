"""HTML health reports per run and for the fleet, and the mail that carries the fleet report."""

from pipeline.report.mail import build_fleet_mail, send_mail
from pipeline.report.render import render_fleet_report, render_run_report

__all__ = ["build_fleet_mail", "render_fleet_report", "render_run_report", "send_mail"]
