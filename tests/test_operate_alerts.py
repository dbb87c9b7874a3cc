"""Alert mails received by a local SMTP server: a pipeline run that fails, verl runs that need attention."""

import email
import email.policy
import time

import pyarrow as pa
import pytest
from aiosmtpd.controller import Controller
from dagster import AssetMaterialization, DagsterInstance, build_run_status_sensor_context, job, op
from operate_support import free_port

from pipeline import lake
from pipeline.alerts import runs_needing_attention
from pipeline.detect.explain import advice_text
from pipeline.resources import SmtpResource, WarehouseResource
from pipeline.sensors import pipeline_failure_mail, run_attention_mail


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


def _warehouse_with_two_runs(warehouse):
    summary = {"failure_class": ["completed"], "last_step": [100], "expected_steps": [100],
               "root_cause_text": pa.array([None], pa.string())}
    lake.write_run_table(warehouse, "run_summary", "healthy-run", pa.table(summary))
    lake.write_run_table(warehouse, "run_summary", "oom-run", pa.table(
        {**summary, "failure_class": ["cuda_oom"], "last_step": [42],
         "root_cause_text": ["torch.OutOfMemoryError: CUDA out of memory."]}))
    for rid, flags in (("healthy-run", [False, False]), ("oom-run", [False, True])):
        lake.write_run_table(warehouse, "step_anomalies", rid, pa.table(
            {"step": [1, 2], "is_anomaly": flags, "anomaly_class": [None, "memory_pressure" if flags[1] else None]}))


@op
def summarise_two_runs(context):
    for rid in ("healthy-run", "oom-run"):
        context.log_event(AssetMaterialization(asset_key="run_summary", partition=rid))


@job
def summarising_job():
    summarise_two_runs()


def test_runs_needing_attention_are_mailed(smtp_server, tmp_path):
    controller, inbox = smtp_server
    _warehouse_with_two_runs(tmp_path / "w")
    [oom] = runs_needing_attention(tmp_path / "w", ["healthy-run", "oom-run"])
    assert (oom["run_id"], oom["failure_class"], oom["anomalous_steps"]) == ("oom-run", "cuda_oom", 1)

    instance = DagsterInstance.ephemeral()
    result = summarising_job.execute_in_process(instance=instance)
    smtp = SmtpResource(host="127.0.0.1", port=controller.port, security="none",
                        sender="verl-health@test.local", recipients=["ml@test.local"], timeout_s=5,
                        reports_url="https://health.test.local/reports/")
    context = build_run_status_sensor_context(
        sensor_name="run_attention_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_success_event(),
        resources={"smtp": smtp, "warehouse": WarehouseResource(path=str(tmp_path / "w"))},
    )
    run_attention_mail(context)
    deadline = time.monotonic() + 5
    while not inbox.messages and time.monotonic() < deadline:
        time.sleep(0.05)
    [(_, msg)] = inbox.messages
    assert msg["Subject"] == "verl-health: 1 finished run(s) need attention (1 failed)"
    body = msg.get_content()
    assert "oom-run: cuda_oom at step 42 of 100" in body
    assert "CUDA out of memory" in body and "memory_pressure" in body
    assert f"advice: {advice_text('failure_class', 'cuda_oom')}" in body and "gpu_memory_utilization" in body
    assert "report: https://health.test.local/reports/runs/oom-run.html" in body
    assert "healthy-run" not in body
