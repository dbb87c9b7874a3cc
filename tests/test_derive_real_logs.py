"""Derive on the real verl logs in ../shared/real-logs: the diagnosis a careful reader gives each file.

Expectations come from reading every file (see SOURCES.md beside them): the failure class in the
design card's vocabulary, the last training step, and for failures the first line of the causal
chain (line number and a piece of its text). A log that simply stops without an error is a `hang`.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from pipeline import derive
from pipeline.lake import connect

# file stem -> (failure_class, last_step, root-cause line number, text in that line)
EXPECTED = {
    "02_maze_ppo_reward_fn_notimplemented": ("python_exception", 0, 292, "NotImplementedError"),
    "03_logicrl_formula_flashattn_undefined_symbol_ray_import_fail": (
        "python_exception", 0, 164, "ImportError: /home/tri/miniconda3/envs/logic/lib/python3.9/site-packages/"
        "flash_attn_2_cuda"),
    "04_logicrl_formula_raylet_disk_95pct_full_truncated": ("hang", 0, None, "is over 95% full"),
    "05_logicrl_formula_wandb_output_log_10steps": ("hang", 9, None, None),
    "06_gui_cursor_agentloop_2026_2steps": ("hang", 2, None, None),
    "08_eto_megatron_grpo_qwen7b_math_two_runs_second_ctrl_c_step11": ("unknown", 11, 3941, "KeyboardInterrupt"),
    "10_eto_megatron_deepseek7b_vllm_kv_preemption_ctrl_c_step1": ("unknown", 0, 601, "KeyboardInterrupt"),
    "11_tpu_xla_port_critic_update_hbm_oom": ("cuda_oom", 0, 5119, "Ran out of memory in memory space hbm"),
    "12_tpu_xla_port_stuck_compiling_step0": ("hang", 0, None, None),
    "13_walar_mt_grpo_wandb_only_no_console_metrics": ("hang", 0, None, None),
    "15_opd_qwen2_3b_length_collapse_step30_wandb_output": ("hang", 59, None, None),
    "16_opd_qwen_1_5b_normal_12steps_wandb_output": ("hang", 11, None, None),
    "18_searchr1_nq_hotpotqa_ppo_3b_cuda_oom_compute_log_prob_step1": (
        "cuda_oom", 0, 12224, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.91 GiB"),
    "20_eto_fsdp_qwen7b_raytaskerror_actordied_step1": (
        "ray_actor_died", 0, 352, "A worker died or was killed while executing a task"),
    "21_eto_megatron_keyerror_old_log_probs_unhandled_error_step1": (
        "python_exception", 0, 448, "KeyError: 'key \"old_log_probs\" not found in TensorDict"),
    "23_spin_online_dpo_sglang_init_no_backend_cpu": (
        "vllm_engine_error", 0, 404, "RuntimeError: No backend type associated with device type cpu"),
    "24_askactively_sglang_tcpstore_nonce_assert_actordied_init": (
        "vllm_engine_error", 0, 194, "RuntimeError: nonce == returnedNonce INTERNAL ASSERT FAILED"),
    "27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit": ("completed", None, None, None),
    "28_retool_dapo_agentloop_tool_decode_errors_ray_disk_95pct": ("hang", 0, None, "is over 95% full"),
    "29_charcount_smollm135m_grpo_start_to_step1_no_ansi": ("hang", 1, None, None),
    "31_searchr1_normal_start_ray_metrics_exporter_noise": ("hang", 0, None, None),
    "34_gui_cursor_agentloop_10steps_rollout_filtering_nov2025": ("hang", 10, None, None),
    "35_gui_cursor_paused_at_ray_debugger_breakpoint": ("hang", 0, 772, "Ray debugger is listening on"),
}


@pytest.fixture(scope="module")
def derived(real_logs_dir, tmp_path_factory) -> SimpleNamespace:
    """Every real log ingested as its own run, then derived."""
    from pipeline.ingest import discover_runs, ingest_run

    wh = tmp_path_factory.mktemp("derive_real") / "warehouse"
    found = discover_runs(real_logs_dir, quiet_period_s=0, now=time.time() + 10**7)
    entries = [e for e in found.entries if e.path.suffix == ".log"]
    for entry in entries:
        ingest_run(entry, wh)
    derive.derive_run_tables(wh, [e.run_id for e in entries])
    con = connect(wh)
    cur = con.execute("select * from run_summary")
    cols = [d[0] for d in cur.description]
    rows = {d["run_id"]: d for d in (dict(zip(cols, r, strict=True)) for r in cur.fetchall())}
    by_stem = {e.path.stem: rows[e.run_id] for e in entries}
    return SimpleNamespace(con=con, summary=by_stem)


def test_every_real_log_has_an_expectation(derived):
    assert set(derived.summary) == set(EXPECTED)


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_real_log_diagnosis(derived, stem):
    failure_class, last_step, line_no, text = EXPECTED[stem]
    got = derived.summary[stem]
    assert got["failure_class"] == failure_class
    if last_step is not None:
        assert got["last_step"] == last_step
    if line_no is not None:
        assert got["root_cause_line_no"] == line_no
    if text is not None:
        assert text in got["root_cause_text"]
    elif failure_class == "completed":
        assert got["root_cause_text"] is None


def test_benign_shutdown_notice_is_an_event_not_the_ending(derived):
    got = derived.summary["27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit"]
    assert got["failure_class"] == "completed"
    n = derived.con.execute(
        "select count(*) from run_events e join run_summary s using (run_id) "
        "where s.source_path like '%27_charcount%' and e.event_class = 'actor_died'").fetchone()[0]
    assert n == 1


def test_config_findings_on_real_logs(derived):
    found = {(stem, finding) for stem, finding in derived.con.execute(
        "select regexp_extract(s.source_path, '([^/]+)\\.log$', 1), f.finding "
        "from config_findings as f join runs as s using (run_id)").fetchall()}
    assert ("10_eto_megatron_deepseek7b_vllm_kv_preemption_ctrl_c_step1", "kv_cache_too_small") in found
    assert ("28_retool_dapo_agentloop_tool_decode_errors_ray_disk_95pct", "disk_nearly_full") in found
    assert ("03_logicrl_formula_flashattn_undefined_symbol_ray_import_fail",
            "train_batch_not_divisible_by_mini_batch") in found
    # Megatron's expert_tensor_parallel_size is the trainer's, not the rollout's tensor parallel size
    assert not {f for s, f in found if s.startswith("08_") and f == "rollout_tp_mismatch"}


def test_silent_runs_say_why_when_the_log_does(derived):
    paused = derived.summary["35_gui_cursor_paused_at_ray_debugger_breakpoint"]
    assert paused["failure_phase"] == "debugger" and "debugger breakpoint" in paused["hang_reason"]
    for stem in ("04_logicrl_formula_raylet_disk_95pct_full_truncated",
                 "28_retool_dapo_agentloop_tool_decode_errors_ray_disk_95pct"):
        assert "disk is over 95% full" in derived.summary[stem]["hang_reason"], stem
    assert derived.summary["16_opd_qwen_1_5b_normal_12steps_wandb_output"]["hang_reason"] is None
