"""Alert mails received by a local SMTP server: a pipeline run that fails, verl runs that need attention."""

import pyarrow as pa
from dagster import AssetMaterialization, DagsterInstance, build_run_status_sensor_context, job, op

from pipeline import lake
from pipeline.alerts import runs_needing_attention
from pipeline.resources import SmtpResource, WarehouseResource
from pipeline.sensors import pipeline_failure_mail, run_attention_mail

# What the fixes knowledge base tells a user to try first, copied from pipeline/knowledge/fixes.json
# after checking each against the class's meaning: memory settings for an OOM, the network for NCCL.
OOM_ADVICE = ("Try: actor_rollout_ref.rollout.gpu_memory_utilization -> 0.7 .. 0.8; "
              "actor_rollout_ref.rollout.max_num_batched_tokens -> lower; "
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu -> 1 (seeds 000 §3.1, §4, 001 §4.2)")
NCCL_ADVICE = ("Try: NCCL_SOCKET_IFNAME -> ^docker0,lo; NCCL_IB_DISABLE -> 0 with InfiniBand, 1 without; "
               "NCCL_DEBUG -> INFO (seeds 001 §2.1, §4.1)")


@op
def collapse():
    raise RuntimeError("warehouse unreachable (on purpose)")


@job
def doomed_job():
    collapse()


def test_failed_run_is_mailed(smtp_server):
    """A failed Dagster run of verl-health is mailed with its job, run id and failing op."""
    port, inbox = smtp_server
    instance = DagsterInstance.ephemeral()
    result = doomed_job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    smtp = SmtpResource(host="127.0.0.1", port=port, security="none",
                        sender="verl-health@test.local", recipients=["oncall@test.local"], timeout_s=5)
    context = build_run_status_sensor_context(
        sensor_name="pipeline_failure_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={"smtp": smtp},
    ).for_run_failure()
    pipeline_failure_mail(context)
    [(_, rcpt, _, msg)] = inbox.wait()
    assert rcpt == ["oncall@test.local"]
    assert msg["Subject"] == f"verl-health: job doomed_job failed (run {result.run_id[:8]})"
    body = msg.get_content()
    assert result.run_id in body
    assert "collapse" in body


def test_no_mail_when_not_configured(smtp_server):
    """Without an SMTP host nothing is sent."""
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
    assert inbox.mails == []


def _warehouse_with_three_runs(warehouse):
    summary = {"failure_class": ["completed"], "last_step": [100], "expected_steps": [100],
               "root_cause_text": pa.array([None], pa.string())}
    lake.write_run_table(warehouse, "run_summary", "healthy-run", pa.table(summary))
    lake.write_run_table(warehouse, "run_summary", "oom-run", pa.table(
        {**summary, "failure_class": ["cuda_oom"], "last_step": [42],
         "root_cause_text": ["torch.OutOfMemoryError: CUDA out of memory."]}))
    lake.write_run_table(warehouse, "run_summary", "nccl-run", pa.table(
        {**summary, "failure_class": ["nccl_timeout"], "last_step": [7],
         "root_cause_text": ["Watchdog caught collective operation timeout"]}))
    for rid, flags in (("healthy-run", [False, False]), ("oom-run", [False, True]), ("nccl-run", [False, False])):
        lake.write_run_table(warehouse, "step_anomalies", rid, pa.table(
            {"step": [1, 2], "is_anomaly": flags, "anomaly_class": [None, "memory_pressure" if flags[1] else None]}))


RUN_IDS = ("healthy-run", "oom-run", "nccl-run")


@op
def summarise_three_runs(context):
    for rid in RUN_IDS:
        context.log_event(AssetMaterialization(asset_key="run_summary", partition=rid))


@job
def summarising_job():
    summarise_three_runs()


def test_runs_needing_attention_are_mailed(smtp_server, tmp_path):
    """Each failed run is mailed with its own class's advice; the healthy run is left out."""
    port, inbox = smtp_server
    _warehouse_with_three_runs(tmp_path / "w")
    attention = runs_needing_attention(tmp_path / "w", list(RUN_IDS))
    assert [(r["run_id"], r["failure_class"], r["anomalous_steps"]) for r in attention] == [
        ("nccl-run", "nccl_timeout", 0), ("oom-run", "cuda_oom", 1)]

    instance = DagsterInstance.ephemeral()
    result = summarising_job.execute_in_process(instance=instance)
    smtp = SmtpResource(host="127.0.0.1", port=port, security="none",
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
    [(_, _, _, msg)] = inbox.wait()
    assert msg["Subject"] == "verl-health: 2 finished run(s) need attention (2 failed)"
    body = msg.get_content().replace("\r\n", "\n")
    paragraphs = {p.split(":", 1)[0]: p.splitlines() for p in body.strip().split("\n\n")}
    assert set(paragraphs) == {"oom-run", "nccl-run"}
    assert paragraphs["oom-run"] == [
        "oom-run: cuda_oom at step 42 of 100",
        "  root cause: torch.OutOfMemoryError: CUDA out of memory.",
        f"  advice: {OOM_ADVICE}",
        "  1 anomalous steps: memory_pressure",
        "  report: https://health.test.local/reports/runs/oom-run.html",
    ]
    assert f"  advice: {NCCL_ADVICE}" in paragraphs["nccl-run"]
