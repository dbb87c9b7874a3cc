"""Alert mails received by a local SMTP server: a pipeline run that fails, verl runs that need attention."""

import pyarrow as pa
from dagster import AssetMaterialization, DagsterInstance, build_run_status_sensor_context, job, op

from pipeline import derive, lake
from pipeline.alerts import runs_needing_attention
from pipeline.defs.resources import SmtpResource, WarehouseResource
from pipeline.defs.sensors import pipeline_failure_mail, run_attention_mail


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
                        sender="verl-health@test.local", recipients=["oncall@test.local", "ml@test.local"],
                        timeout_s=5)
    context = build_run_status_sensor_context(
        sensor_name="pipeline_failure_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(),
        resources={"smtp": smtp},
    ).for_run_failure()
    pipeline_failure_mail(context)
    [(sender, rcpt, _, msg)] = inbox.wait()
    assert (sender, rcpt) == ("verl-health@test.local", ["oncall@test.local", "ml@test.local"])
    assert (msg["From"], msg["To"]) == ("verl-health@test.local", "oncall@test.local, ml@test.local")
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


LONG_CAUSE = "torch.OutOfMemoryError: CUDA out of memory. " + "x" * 400


def _summary(failure_class="completed", last_step=100, cause=None) -> pa.Table:
    return pa.table({"failure_class": [failure_class], "last_step": [last_step], "expected_steps": [100],
                     "root_cause_text": pa.array([cause], pa.string()),
                     "training_outcome": pa.array([None], pa.string())})


def _anomalies(*classes) -> pa.Table:
    """Step 1 normal, then one flagged step per class given."""
    return pa.table({"step": list(range(1, len(classes) + 2)), "is_anomaly": [False] + [True] * len(classes),
                     "anomaly_class": pa.array([None, *classes], pa.string()),
                     "episode_id": pa.array([None, *range(1, len(classes) + 1)], pa.int64())})


def _warehouse(warehouse):
    """Five runs: healthy, an OOM with two anomalies and a long cause, an NCCL timeout, a crash with its own
    run_advice rows, and a completed run with one anomaly (and a line its summary kept)."""
    runs = {
        "healthy-run": (_summary(), _anomalies()),
        "oom-run": (_summary("cuda_oom", 42, LONG_CAUSE), _anomalies("memory_pressure", "gen_slowdown")),
        "nccl-run": (_summary("nccl_timeout", 7, "Watchdog caught collective operation timeout"), _anomalies()),
        "advised-run": (_summary("python_exception", 3, "KeyError: 'old_log_probs'"), _anomalies()),
        "spiky-run": (_summary(cause="a warning kept as the last error"), _anomalies("kl_spike")),
    }
    for rid, (summary, anomalies) in runs.items():
        lake.write_run_table(warehouse, "run_summary", rid, summary)
        lake.write_run_table(warehouse, "step_anomalies", rid, anomalies)
    lake.write_run_table(warehouse, "run_advice", "advised-run", pa.table({
        "episode_id": pa.array([None, None, None, None, 1], pa.int64()), "rank": [2, 1, 3, 4, 1],
        "kind": ["config", "config", "check", "config", "config"],
        "setting": pa.array(["data.max_prompt_length", "trainer.resume_mode", None, "c.d", "e.f"], pa.string()),
        "current_value": pa.array([None, "auto", None, "2", "1"], pa.string()),
        "suggested_value": pa.array(["1024", "disable", None, "3", "2"], pa.string()),
        "why": ["w2", "w1", "w3", "w4", "an episode's"]}))
    derive.derive_fleet_table(warehouse, "run_attention")
    return list(runs)


RUN_IDS = ("healthy-run", "oom-run", "nccl-run", "advised-run", "spiky-run")


@op
def summarise_the_runs(context):
    for rid in RUN_IDS:
        context.log_event(AssetMaterialization(asset_key="run_summary", partition=rid))


@job
def summarising_job():
    summarise_the_runs()


def test_runs_needing_attention_are_mailed(smtp_server, tmp_path):
    """Each failed run is mailed with its cause (cut at 300 characters) and its own advice: its run_advice
    rows on how it ended, by rank (a check as a check; an episode's rows are not about the ending); a run with
    none gets no canned advice; anomalous runs with their classes; the healthy run is left out."""
    port, inbox = smtp_server
    _warehouse(tmp_path / "w")
    instance = DagsterInstance.ephemeral()
    result = summarising_job.execute_in_process(instance=instance)
    smtp = SmtpResource(host="127.0.0.1", port=port, security="none",
                        sender="verl-health@test.local", recipients=["ml@test.local", "oncall@test.local"],
                        timeout_s=5, reports_url="https://health.test.local/reports/")
    context = build_run_status_sensor_context(
        sensor_name="run_attention_mail",
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        dagster_event=result.get_run_success_event(),
        resources={"smtp": smtp, "warehouse": WarehouseResource(path=str(tmp_path / "w"))},
    )
    run_attention_mail(context)
    [(sender, rcpts, _, msg)] = inbox.wait()
    assert (sender, rcpts) == ("verl-health@test.local", ["ml@test.local", "oncall@test.local"])
    assert (msg["From"], msg["To"]) == ("verl-health@test.local", "ml@test.local, oncall@test.local")
    assert msg["Subject"] == "verl-health: 4 finished run(s) need attention (3 failed)"
    body = msg.get_content().replace("\r\n", "\n")
    paragraphs = {p.split(":", 1)[0]: p.splitlines() for p in body.strip().split("\n\n")}
    report = "  report: https://health.test.local/reports/runs/{}.html".format
    assert paragraphs == {
        "advised-run": ["advised-run: Python exception at step 3 of 100",
                        "  root cause: KeyError: 'old_log_probs'",
                        "  try: trainer.resume_mode: auto -> disable (w1)",
                        "  try: data.max_prompt_length: not in the log -> 1024 (w2)",
                        "  check: w3",
                        report("advised-run")],
        "nccl-run": ["nccl-run: NCCL timeout at step 7 of 100",
                     "  root cause: Watchdog caught collective operation timeout",
                     report("nccl-run")],
        "oom-run": ["oom-run: CUDA OOM at step 42 of 100",
                    f"  root cause: {LONG_CAUSE[:300]}",
                    "  2 anomalous steps: gen_slowdown, memory_pressure",
                    report("oom-run")],
        "spiky-run": ["spiky-run: Completed at step 100 of 100",
                      "  1 anomalous steps: kl_spike",
                      report("spiky-run")],
    }


def test_runs_needing_attention_without_anomalies_or_advice_tables(tmp_path):
    """A warehouse with run_summary alone still names the failed runs, with no anomalies and no advice."""
    lake.write_run_table(tmp_path, "run_summary", "oom-run", _summary("cuda_oom", 42, "CUDA out of memory"))
    lake.write_run_table(tmp_path, "run_summary", "healthy-run", _summary())
    derive.derive_fleet_table(tmp_path, "run_attention")
    assert runs_needing_attention(tmp_path, ["oom-run", "healthy-run"]) == [{
        "run_id": "oom-run", "failure_class": "cuda_oom", "failed": True, "last_step": 42, "expected_steps": 100,
        "root_cause_text": "CUDA out of memory", "anomalous_steps": 0, "anomaly_classes": [], "advice": []}]
    assert runs_needing_attention(tmp_path, []) == []
