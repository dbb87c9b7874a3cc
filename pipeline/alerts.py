"""Alert mails: a failed pipeline run."""

from __future__ import annotations

from email.message import EmailMessage


def pipeline_failure_message(dagster_run, failure_event, smtp) -> EmailMessage:
    """A plain-text mail about a failed verl-health Dagster run (no secrets, no log bodies)."""
    msg = EmailMessage()
    msg["Subject"] = f"verl-health: job {dagster_run.job_name} failed (run {dagster_run.run_id[:8]})"
    msg["From"] = smtp.sender
    msg["To"] = ", ".join(smtp.recipients)
    reason = getattr(failure_event, "message", None) or "see the Dagster UI for the error"
    msg.set_content(
        f"The verl-health job {dagster_run.job_name} failed.\n\n"
        f"Dagster run: {dagster_run.run_id}\n"
        f"Reason: {reason}\n"
    )
    return msg
