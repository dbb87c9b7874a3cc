"""The attention mail carries each run's own advice rows and leaves out runs that did not fail."""

from __future__ import annotations

import pyarrow as pa

from pipeline import derive, lake
from pipeline.alerts import run_attention_message, runs_needing_attention
from pipeline.defs.resources import SmtpResource


def _run(warehouse, run_id: str, failure_class: str, advice: list[tuple] = ()) -> None:
    lake.write_run_table(warehouse, "run_summary", run_id, pa.table({
        "failure_class": [failure_class], "last_step": [42], "expected_steps": [100],
        "root_cause_text": pa.array(["torch.OutOfMemoryError: CUDA out of memory."], pa.string())}))
    lake.write_run_table(warehouse, "run_advice", run_id, pa.table({
        "episode_id": pa.array([None] * len(advice), pa.int64()),
        "rank": pa.array([i + 1 for i in range(len(advice))], pa.int64()),
        "kind": pa.array(["env" if a[0].isupper() else "config" for a in advice], pa.string()),
        "setting": pa.array([a[0] for a in advice], pa.string()),
        "current_value": pa.array([a[1] for a in advice], pa.string()),
        "suggested_value": pa.array([a[2] for a in advice], pa.string()),
        "why": pa.array([a[3] for a in advice], pa.string())}))


def test_mail_lists_the_runs_own_changes_and_skips_stops_and_cut_logs(tmp_path):
    _run(tmp_path, "oom-run", "cuda_oom", [
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8", "4", "smaller backward passes"),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", "false", "true", "recompute activations"),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", "false", "true", "offload Adam"),
        ("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True", "fragmentation")])
    _run(tmp_path, "ctrl-c-run", "interrupted")
    _run(tmp_path, "cut-run", "no_outcome")
    derive.derive_fleet_table(tmp_path, "run_attention")
    runs = runs_needing_attention(tmp_path, ["oom-run", "ctrl-c-run", "cut-run"])
    assert [r["run_id"] for r in runs] == ["oom-run"]
    smtp = SmtpResource(host="127.0.0.1", port=25, sender="a@test.local", recipients=["b@test.local"])
    msg = run_attention_message(runs, smtp)
    assert msg["Subject"] == "verl-health: 1 finished run(s) need attention (1 failed)"
    assert msg.get_content().splitlines()[2:] == [
        "  try: actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 8 -> 4 (smaller backward passes)",
        "  try: actor_rollout_ref.model.enable_gradient_checkpointing: false -> true (recompute activations)",
        "  try: actor_rollout_ref.actor.fsdp_config.optimizer_offload: false -> true (offload Adam)",
    ]
