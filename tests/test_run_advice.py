"""run_advice: the changes suggested for a run, from its failure, its phase, its own config and its causal line.

Each case is a hand-made run_summary row with a config dump; the expected rows are worked out by hand from
verl's config keys (the knob of the phase that ran out, halved from the run's own value, and so on).
"""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest

from pipeline import derive, lake
from pipeline.lake import connect

MEMORY_KNOBS = (
    "gpu_memory_utilization", "micro_batch_size", "max_token_len", "max_num_batched_tokens", "max_num_seqs",
    "max_response_length",
)


def config(**overrides) -> dict:
    """A verl config dump (nested dicts) with the given dotted keys set."""
    cfg: dict = {}
    for dotted, value in overrides.items():
        node = cfg
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return cfg


def write_run(warehouse, run_id: str, failure_class: str, phase: str | None, cfg: dict | None,
              cause: str = "", hang_reason: str | None = None, findings: tuple[str, ...] = ()) -> None:
    """The two tables run_advice reads, for one run."""
    lake.write_run_table(warehouse, "run_summary", run_id, pa.table({
        "failure_class": [failure_class], "failure_phase": pa.array([phase], pa.string()),
        "root_cause_text": [cause], "hang_reason": pa.array([hang_reason], pa.string()),
        "config_json": pa.array([json.dumps(cfg) if cfg is not None else None], pa.string()),
    }))
    lake.write_run_table(warehouse, "config_findings", run_id, pa.table({
        "finding": pa.array(list(findings), pa.string())}))


def advice(warehouse, run_ids: list[str]) -> dict[str, list[tuple]]:
    """Per run: (setting, current_value, suggested_value) in rank order."""
    derive.derive_run_table(warehouse, "run_advice", run_ids)
    con = connect(warehouse)
    got: dict[str, list[tuple]] = {r: [] for r in run_ids}
    for rid, setting, current, suggested in con.execute(
            "select run_id, setting, current_value, suggested_value from run_advice order by run_id, rank"
    ).fetchall():
        got[rid].append((setting, current, suggested))
    return got


A, R, C = "actor_rollout_ref__actor__", "actor_rollout_ref__rollout__", "critic__"


def test_oom_in_update_actor_halves_the_actors_micro_batch(tmp_path):
    cfg = config(**{A + "ppo_micro_batch_size_per_gpu": 8, A + "use_dynamic_bsz": False,
                    "actor_rollout_ref__model__enable_gradient_checkpointing": False,
                    A + "fsdp_config__optimizer_offload": False})
    write_run(tmp_path, "r", "cuda_oom", "update_actor", cfg)
    assert advice(tmp_path, ["r"])["r"] == [
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8", "4"),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", "false", "true"),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", "false", "true"),
    ]


def test_dynamic_batch_size_turns_the_advice_to_token_lengths(tmp_path):
    cfg = config(**{A + "ppo_micro_batch_size_per_gpu": 8, A + "use_dynamic_bsz": True,
                    A + "ppo_max_token_len_per_gpu": 16384,
                    "actor_rollout_ref__model__enable_gradient_checkpointing": True,
                    A + "fsdp_config__optimizer_offload": True})
    write_run(tmp_path, "r", "cuda_oom", "update_actor", cfg)
    assert advice(tmp_path, ["r"])["r"] == [("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "16384", "8192")]


def test_oom_in_generation_lowers_gpu_memory_utilization_from_the_runs_value(tmp_path):
    write_run(tmp_path, "low", "cuda_oom", "gen", config(**{R + "gpu_memory_utilization": 0.6,
                                                             R + "max_num_batched_tokens": 8192,
                                                             R + "tensor_model_parallel_size": 2}))
    write_run(tmp_path, "floor", "cuda_oom", "gen", config(**{R + "gpu_memory_utilization": 0.3}))
    got = advice(tmp_path, ["low", "floor"])
    assert got["low"] == [
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6", "0.5"),
        ("actor_rollout_ref.rollout.max_num_batched_tokens", "8192", "4096"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "2", "4"),
    ]
    # already at the floor: no row moves it; the other knobs are not in its config, so they only say "lower"
    assert ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.3", "0.2") not in got["floor"]
    assert all(current is None for _, current, _ in got["floor"])


def test_oom_in_ref_uses_the_refs_own_knobs(tmp_path):
    cfg = config(**{"actor_rollout_ref__ref__log_prob_micro_batch_size_per_gpu": 16,
                    "actor_rollout_ref__ref__fsdp_config__param_offload": False,
                    R + "gpu_memory_utilization": 0.6})
    write_run(tmp_path, "r", "cuda_oom", "ref", cfg)
    assert advice(tmp_path, ["r"])["r"] == [
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "16", "8"),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", "false", "true"),
    ]


def test_older_verl_key_names_are_read(tmp_path):
    """Real log 18 (early 2025 verl) names the global `log_prob_micro_batch_size`, not the per-GPU key."""
    write_run(tmp_path, "r", "cuda_oom", "old_log_prob", config(**{R + "log_prob_micro_batch_size": 128}))
    assert advice(tmp_path, ["r"])["r"] == [("actor_rollout_ref.rollout.log_prob_micro_batch_size", "128", "64")]


def test_fragmentation_named_by_the_error_comes_first(tmp_path):
    cause = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 79.15 GiB of which 1.02 GiB is free. Of the allocated memory 60.11 GiB is allocated by PyTorch, "
             "and 12.60 GiB is reserved by PyTorch but unallocated.")
    write_run(tmp_path, "frag", "cuda_oom", "update_actor", config(**{A + "ppo_micro_batch_size_per_gpu": 2}), cause)
    write_run(tmp_path, "tight", "cuda_oom", "update_actor", config(**{A + "ppo_micro_batch_size_per_gpu": 2}),
              cause.replace("12.60 GiB", "0.20 GiB"))
    got = advice(tmp_path, ["frag", "tight"])
    assert got["frag"][0] == ("PYTORCH_CUDA_ALLOC_CONF", None, "expandable_segments:True")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in [s for s, _, _ in got["tight"]]


def test_nccl_advice_quotes_rank_op_and_timeout(tmp_path):
    cause = ("[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4486, OpType=ALLTOALL, "
             "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.")
    write_run(tmp_path, "r", "nccl_timeout", "update_weights", config(), cause)
    derive.derive_run_table(tmp_path, "run_advice", ["r"])
    whys = [w for (w,) in connect(tmp_path).execute("select why from run_advice order by rank").fetchall()]
    assert "rank 7 timed out in ALLTOALL after 600 s" in whys[0]


def test_a_stalled_engine_short_of_kv_cache_gets_more_memory_not_less(tmp_path):
    write_run(tmp_path, "r", "hang", "gen", config(**{R + "gpu_memory_utilization": 0.6}),
              hang_reason="no progress for 47.0 min after step 3", findings=("kv_cache_too_small",))
    got = advice(tmp_path, ["r"])["r"]
    assert got[0] == ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6", "0.7")


def test_completed_runs_get_no_advice(tmp_path):
    write_run(tmp_path, "r", "completed", None, config(**{R + "gpu_memory_utilization": 0.6}))
    assert advice(tmp_path, ["r"])["r"] == []


def test_every_failure_class_gets_advice(tmp_path):
    classes = ("cuda_oom", "nccl_timeout", "ray_actor_died", "host_oom_killed", "nan_divergence",
               "python_exception", "vllm_engine_error", "unknown")
    for cls in classes:
        write_run(tmp_path, cls, cls, "update_actor", config(), "Watchdog caught collective operation timeout")
    write_run(tmp_path, "hang", "hang", "gen", config(), hang_reason="no progress for 30.0 min after step 9")
    got = advice(tmp_path, [*classes, "hang"])
    assert all(got[rid] for rid in got), {rid: rows for rid, rows in got.items() if not rows}


@pytest.mark.parametrize("phase", ["startup", "gen", "testing", "old_log_prob", "ref", "values", "update_actor",
                                   "update_critic", "reward", "update_weights"])
def test_no_oom_advice_moves_a_memory_knob_up(tmp_path, phase):
    """Over a grid of configs (dynamic batch on and off, small and large knobs), every OOM row that moves a
    numeric memory knob moves it down."""
    ids = []
    for k, (dyn, size, util) in enumerate(itertools.product((False, True), (1, 2, 64), (0.3, 0.45, 0.9))):
        cfg = config(**{
            A + "use_dynamic_bsz": dyn, R + "log_prob_use_dynamic_bsz": dyn, C + "use_dynamic_bsz": dyn,
            "actor_rollout_ref__ref__log_prob_use_dynamic_bsz": dyn,
            A + "ppo_micro_batch_size_per_gpu": size, A + "ppo_max_token_len_per_gpu": size * 1024,
            R + "log_prob_micro_batch_size_per_gpu": size, R + "log_prob_max_token_len_per_gpu": size * 1024,
            "actor_rollout_ref__ref__log_prob_micro_batch_size_per_gpu": size,
            C + "ppo_micro_batch_size_per_gpu": size, C + "ppo_max_token_len_per_gpu": size * 1024,
            R + "gpu_memory_utilization": util, R + "max_num_batched_tokens": size * 512,
        })
        ids.append(f"r{k}")
        write_run(tmp_path, ids[-1], "cuda_oom", phase, cfg)
    moved = 0
    for rows in advice(tmp_path, ids).values():
        for setting, current, suggested in rows:
            if any(knob in setting for knob in MEMORY_KNOBS) and current is not None:
                assert float(suggested) < float(current), (setting, current, suggested)
                moved += 1
    assert moved or phase == "startup"


@pytest.mark.parametrize("bulk", ["list", "string"])
def test_a_huge_config_dump_gets_the_same_advice(tmp_path, bulk):
    # a 2 M-element list, or a 30 MB string, in the dump: each rule parsing the whole dump ran out of memory
    cfg = config(**{A + "ppo_micro_batch_size_per_gpu": 8, A + "use_dynamic_bsz": False,
                    "actor_rollout_ref__model__enable_gradient_checkpointing": False,
                    A + "fsdp_config__optimizer_offload": False})
    cfg["bomb"] = [1] * 2_000_000 if bulk == "list" else "x" * 30_000_000
    write_run(tmp_path, "r", "cuda_oom", "update_actor", cfg)
    assert advice(tmp_path, ["r"])["r"] == [
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "8", "4"),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", "false", "true"),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", "false", "true"),
    ]
