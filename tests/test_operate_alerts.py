"""The pipeline-failure mail: a job fails on purpose and the run-failure sensor mails a local SMTP server."""

import email
import email.policy
import time

import pytest
from aiosmtpd.controller import Controller
from dagster import DagsterInstance, build_run_status_sensor_context, job, op
from operate_support import free_port

from pipeline.resources import SmtpResource
from pipeline.sensors import pipeline_failure_mail


class _Inbox:
    """An aiosmtpd handler that keeps every message it receives."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((envelope.rcpt_tos, email.message_from_bytes(envelope.content, policy=email.policy.default)))
        return "250 OK"


@pytest.fixture
def smtp_server():
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield controller, inbox
    finally:
        controller.stop()


@op
def collapse():
    raise RuntimeError("warehouse unreachable (on purpose)")


@job
def doomed_job():
    collapse()


def test_failed_run_is_mailed(smtp_server):
    controller, inbox = smtp_server
    instance = DagsterInstance.ephemeral()
    result = doomed_job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    smtp = SmtpResource(host="127.0.0.1", port=controller.port, security="none",
                        sender="verl-health@test.local", recipients=["oncall@test.local"], timeout_s=5)
    context = build_run_status_sensor_context(
        sensor_name="pipeline_failure_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={"smtp": smtp},
    ).for_run_failure()
    pipeline_failure_mail(context)
    deadline = time.monotonic() + 5
    while not inbox.messages and time.monotonic() < deadline:
        time.sleep(0.05)
    [(rcpt, msg)] = inbox.messages
    assert rcpt == ["oncall@test.local"]
    assert msg["Subject"] == f"verl-health: job doomed_job failed (run {result.run_id[:8]})"
    body = msg.get_content()
    assert result.run_id in body
    assert "collapse" in body


def test_no_mail_when_not_configured(smtp_server):
    _, inbox = smtp_server
    instance = DagsterInstance.ephemeral()
    result = doomed_job.execute_in_process(instance=instance, raise_on_error=False)
    context = build_run_status_sensor_context(
        sensor_name="pipeline_failure_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={"smtp": SmtpResource(host="")},
    ).for_run_failure()
    pipeline_failure_mail(context)
    assert inbox.messages == []
