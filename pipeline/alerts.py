"""Alert mails: a failed pipeline run, and finished verl runs that failed or show anomalies."""

from __future__ import annotations

from email.message import EmailMessage

from pipeline.credentials import mask_secrets
from pipeline.report.labels import CLASS_LABELS


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
        f"Reason: {mask_secrets(reason)}\n"
    )
    return msg


def runs_needing_attention(warehouse, run_ids: list[str]) -> list[dict]:
    """Runs among `run_ids` that need attention (run_attention: failed, hung, anomalous or slower), each with its
    run_advice rows on how it ended."""
    from pipeline.lake import reader

    with reader(warehouse, run_ids, only=("run_attention", "run_summary", "run_advice")) as con:
        views = {v for (v,) in con.execute("select view_name from duckdb_views()").fetchall()}
        if not {"run_attention", "run_summary"} <= views or not run_ids:
            return []
        advice = (
            "select run_id, list({'kind': kind, 'setting': setting, 'current': current_value, "
            "'suggested': suggested_value, 'why': why} order by rank) as rows from run_advice "
            "where episode_id is null group by all"
            if "run_advice" in views
            else "select null::varchar as run_id, [] as rows where false"
        )
        rows = con.execute(
            f"""
            with adv as ({advice})
            select a.run_id, a.failure_class, a.failed, s.last_step, s.expected_steps, s.root_cause_text,
                   a.anomalous_steps, a.anomaly_classes, coalesce(adv.rows, [])
            from run_attention as a join run_summary as s using (run_id) left join adv using (run_id)
            where a.run_id in (select unnest($run_ids::varchar[])) and a.needs_attention
            order by a.run_id
            """,
            {"run_ids": run_ids},
        ).fetchall()
    keys = ("run_id", "failure_class", "failed", "last_step", "expected_steps", "root_cause_text", "anomalous_steps",
            "anomaly_classes", "advice")
    return [dict(zip(keys, row, strict=True)) for row in rows]


ADVICE_IN_MAIL = 3


def run_attention_message(runs: list[dict], smtp) -> EmailMessage:
    """A plain-text mail listing newly analysed runs that failed or show anomalies, one paragraph each,
    with the first changes to try for a failed run (its run_advice rows on how it ended: a change, or what
    to check) and, when `smtp.reports_url` is set, a link to each run's report."""
    msg = EmailMessage()
    failed = sum(r["failed"] for r in runs)
    msg["Subject"] = f"verl-health: {len(runs)} finished run(s) need attention ({failed} failed)"
    msg["From"] = smtp.sender
    msg["To"] = ", ".join(smtp.recipients)
    parts = []
    for r in runs:
        outcome = CLASS_LABELS.get(r["failure_class"], r["failure_class"])
        lines = [f"{r['run_id']}: {outcome} at step {r['last_step']} of {r['expected_steps']}"]
        if r["root_cause_text"] and r["failure_class"] != "completed":
            lines.append(f"  root cause: {r['root_cause_text'][:300]}")
        for a in (r.get("advice") or [])[:ADVICE_IN_MAIL]:
            if a["kind"] == "check":
                lines.append(f"  check: {a['why']}")
            else:
                lines.append(f"  try: {a['setting']}: {a['current'] or 'not in the log'} -> {a['suggested']} "
                             f"({a['why']})")
        if r["anomalous_steps"]:
            lines.append(f"  {r['anomalous_steps']} anomalous steps: {', '.join(sorted(r['anomaly_classes']))}")
        if smtp.reports_url:
            lines.append(f"  report: {smtp.reports_url.rstrip('/')}/runs/{r['run_id']}.html")
        parts.append("\n".join(lines))
    msg.set_content("\n\n".join(parts) + "\n")
    return msg
