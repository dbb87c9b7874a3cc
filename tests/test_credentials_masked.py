"""Credentials a log prints (a W&B API key, Hugging Face and OpenAI tokens, a password in the config dump) stay in
`log_lines` only: no report, mail (received over SMTP), Dagster event or other warehouse text holds them."""

from __future__ import annotations

import datetime as dt
import shutil

import duckdb
import pytest
from dagster import DagsterInstance

from pipeline.alerts import run_attention_message, runs_needing_attention
from pipeline.credentials import mask_secrets
from pipeline.defs.analysis import analyze_archive
from pipeline.defs.resources import SmtpResource
from pipeline.report import send_mail

W_AND_B_KEY = "3f9a1c0b7d2e4f6a8b9c0d1e2f3a4b5c6d7e8f90"
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SK_TOKEN = "sk-proj-" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
PASSWORD = "Hunter2-but-longer"
SECRETS = (W_AND_B_KEY, HF_TOKEN, SK_TOKEN, PASSWORD)
OOM_LINE = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.07 GiB. GPU"
CONFIG_LINE = "'project_name': 'Search-R1',"


@pytest.fixture(scope="module")
def leaky(real_logs_dir, tmp_path_factory):
    """REAL/17 (a CUDA OOM) with both tokens on its causal line and a token and a password in its config dump;
    REAL/16 with `wandb: WARNING api_key=<40 hex>` appended. Analysed with the fleet mail sent over SMTP."""
    root = tmp_path_factory.mktemp("leaky")
    archive = root / "archive"
    archive.mkdir()
    oom = (real_logs_dir / "17_searchr1_nq_ppo_3b_cuda_oom_update_actor_step1.log").read_text()
    assert oom.count(OOM_LINE + "\n") == 1 and oom.count(CONFIG_LINE) == 1
    config_line = next(line for line in oom.splitlines() if CONFIG_LINE in line)
    extra = "\n".join(config_line.replace(CONFIG_LINE, kv) for kv in (
        f"'hf_token': '{HF_TOKEN}',", f"'password': '{PASSWORD}',", f"'WANDB_API_KEY': '{W_AND_B_KEY}',"))
    oom = oom.replace(OOM_LINE + "\n", f"{OOM_LINE} (token {HF_TOKEN}, key {SK_TOKEN})\n")
    oom = oom.replace(config_line, extra + "\n" + config_line)
    (archive / "oom-run.log").write_text(oom)
    normal = real_logs_dir / "16_opd_qwen_1_5b_normal_12steps_wandb_output.log"
    shutil.copy(normal, archive / "wandb-run.log")
    with open(archive / "wandb-run.log", "a") as fh:
        fh.write(f"wandb: WARNING api_key={W_AND_B_KEY}\n")
    return root


def _mail_env(monkeypatch, port):
    for name, value in {"SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_SECURITY": "none",
                        "MAIL_FROM": "nightly@test.local", "MAIL_TO": "rl-team@test.local"}.items():
        monkeypatch.setenv(f"VERL_HEALTH_{name}", value)


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_credential_leaves_log_lines(leaky, smtp_server, monkeypatch):
    port, inbox = smtp_server
    _mail_env(monkeypatch, port)
    instance = DagsterInstance.ephemeral()
    warehouse, reports = leaky / "warehouse", leaky / "reports"
    outcome = analyze_archive(leaky / "archive", warehouse, reports, instance=instance, mail=True,
                             day=dt.date.today())  # the copies' new templates are today's
    assert sorted(outcome.run_ids) == ["oom-run", "wandb-run"]
    con = duckdb.connect()
    # the input holds every one of them: log_lines keeps each line as it was read
    raw = con.execute("select string_agg(text, '\n') from read_parquet($f)",
                      {"f": str(warehouse / "log_lines" / "*" / "*.parquet")}).fetchone()[0]
    assert _leaks(raw) == list(SECRETS)
    # every text of every other table (nested texts too, as their JSON)
    for path in sorted(p for p in warehouse.rglob("*.parquet") if "log_lines" not in p.parts):
        found = con.execute("select * from read_parquet($f)", {"f": str(path)}).fetchall()
        text = "\n".join(str(v) for row in found for v in row)
        assert _leaks(text) == [], path
    summary = con.execute("select root_cause_text, failure_class from read_parquet($f)",
                          {"f": str(warehouse / "run_summary" / "run_id=oom-run" / "*.parquet")}).fetchone()
    assert summary == (f"{OOM_LINE} (token hf_***, key sk-***)", "cuda_oom")
    config = con.execute("select config_json::json->'$.trainer' from read_parquet($f)",
                         {"f": str(warehouse / "runs" / "run_id=oom-run" / "*.parquet")}).fetchone()[0]
    assert '"hf_token":"***"' in config.replace(" ", "") and '"password":"***"' in config.replace(" ", "")
    assert '"project_name":"Search-R1"' in config.replace(" ", "")
    # reports (HTML, text renderings, the mail's page), the fleet mail as received (each part decoded)
    for path in sorted(p for p in reports.rglob("*") if p.is_file()):
        assert _leaks(path.read_bytes().decode("utf-8", "replace")) == [], path
    [mail] = inbox.wait()
    parts = [p.get_content() for p in mail.message.walk() if not p.is_multipart()]
    # the warning is a new error template: the mail shows its example line, masked
    assert any("api_key=***" in (p if isinstance(p, str) else p.decode("utf-8", "replace")) for p in parts)
    for part in parts:
        assert _leaks(part if isinstance(part, str) else part.decode("utf-8", "replace")) == []
    # the attention mail for the failed run, as received
    smtp = SmtpResource(host="127.0.0.1", port=port, security="none", sender="a@test.local",
                        recipients=["b@test.local"], timeout_s=5)
    send_mail(run_attention_message(runs_needing_attention(warehouse, ["oom-run"]), smtp), smtp)
    attention = inbox.wait(2)[1].message.get_content()
    assert "root cause: " + OOM_LINE + " (token hf_***, key sk-***)" in attention and _leaks(attention) == []
    # every Dagster event of the analysis
    for run in instance.get_runs():
        assert _leaks("\n".join(str(e) for e in instance.all_logs(run.run_id))) == []


def test_mask_secrets_on_the_known_forms():
    """Each form the masking knows, and text that only looks like one left alone."""
    cases = {
        f"wandb: WARNING api_key={W_AND_B_KEY}": "wandb: WARNING api_key=***",
        f"export WANDB_API_KEY {W_AND_B_KEY}": "export WANDB_API_KEY ***",
        f"login with {HF_TOKEN} ok": "login with hf_*** ok",
        f"OPENAI {SK_TOKEN}.": "OPENAI sk-***.",
        "aws AKIAIOSFODNN7EXAMPLE used": "aws AKIA*** used",
        "{'HF_TOKEN': 'abc', \"db_password\": \"x y\"}": "{'HF_TOKEN': '***', \"db_password\": \"***\"}",
        "AWS_SECRET=abc/def; password: hunter2 end": "AWS_SECRET=***; password: *** end",
        "num_key_value_heads: 8, max_num_batched_tokens=8192, sk-short": "num_key_value_heads: 8, "
                                                                        "max_num_batched_tokens=8192, sk-short",
        # verl's own settings named *_key / *_token hold column names and tokens (REAL/02's config dump)
        "{'prompt_key': 'prompt', 'reward_fn_key': 'data_source', 'pad_token': '<pad>'}":
            "{'prompt_key': 'prompt', 'reward_fn_key': 'data_source', 'pad_token': '<pad>'}",
    }
    assert {text: mask_secrets(text) for text in cases} == cases
