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


def derive_advice(warehouse, run_ids: list[str]) -> None:
    """run_advice of the runs, after the run_facts it reads (their device, engine and roles)."""
    derive.derive_run_table(warehouse, "run_facts", run_ids)
    derive.derive_run_table(warehouse, "run_advice", run_ids)


def advice(warehouse, run_ids: list[str]) -> dict[str, list[tuple]]:
    """Per run: (setting, current_value, suggested_value) in rank order."""
    derive_advice(warehouse, run_ids)
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
    write_run(tmp_path, "low", "cuda_oom", "gen", config(**{R + "name": "vllm", R + "gpu_memory_utilization": 0.6,
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
    derive_advice(tmp_path, ["r"])
    whys = [w for (w,) in connect(tmp_path).execute("select why from run_advice order by rank").fetchall()]
    assert "rank 7 timed out in ALLTOALL after 600 s" in whys[0]


def test_a_stalled_engine_short_of_kv_cache_gets_more_memory_not_less(tmp_path):
    write_run(tmp_path, "r", "hang", "gen", config(**{R + "name": "vllm", R + "gpu_memory_utilization": 0.6}),
              hang_reason="no progress for 47.0 min after step 3", findings=("kv_cache_too_small",))
    got = advice(tmp_path, ["r"])["r"]
    assert got[0] == ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6", "0.7")


def test_completed_runs_get_no_advice(tmp_path):
    write_run(tmp_path, "r", "completed", None, config(**{R + "gpu_memory_utilization": 0.6}))
    assert advice(tmp_path, ["r"])["r"] == []


def test_every_failure_class_gets_advice(tmp_path):
    classes = ("cuda_oom", "nccl_timeout", "ray_actor_died", "host_oom_killed", "nan_divergence",
               "python_exception", "vllm_engine_error", "unknown", "interrupted", "no_outcome")
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
# ---------------------------------------------------------------- advice for anomaly episodes, and what a run has

def write_episode(warehouse, run_id: str, anomaly_class: str, steps: range, explanation: str = "") -> None:
    """One anomaly episode (episode_id 1) in step_anomalies, as detection writes it."""
    n = len(steps)
    lake.write_run_table(warehouse, "step_anomalies", run_id, pa.table({
        "step": pa.array(list(steps), pa.int64()), "is_anomaly": [True] * n, "score": [0.8] * n,
        "anomaly_class": [anomaly_class] * n, "explanation": [explanation] * n,
        "episode_id": pa.array([1] * n, pa.int64())}))


def write_lines(warehouse, run_id: str, lines: list[str]) -> None:
    lake.write_run_table(warehouse, "log_lines", run_id, pa.table({
        "file": ["driver.log"] * len(lines), "line_no": pa.array(range(1, len(lines) + 1), pa.int64()),
        "text": lines, "kind": ["other"] * len(lines)}))


def rows_of(warehouse, run_ids: list[str]) -> dict[str, list[dict]]:
    """Per run: every run_advice row, run level first, in rank order."""
    derive_advice(warehouse, run_ids)
    con = connect(warehouse)
    got: dict[str, list[dict]] = {r: [] for r in run_ids}
    cur = con.execute("select * from run_advice order by run_id, episode_id nulls first, rank")
    names = [d[0] for d in cur.description]
    for row in cur.fetchall():
        got[row[names.index("run_id")]].append(dict(zip(names, row, strict=True)))
    return got


def test_episode_advice_names_its_episode_and_never_keeps_the_runs_value(tmp_path):
    """A NaN episode on a run whose grad_clip is already 1.0 (verl's default) and lr 1e-6: clip tighter, lr halved."""
    write_run(tmp_path, "r", "nan_divergence", "update_actor",
              config(**{A + "grad_clip": 1.0, A + "optim__lr": 1e-6, "algorithm__adv_estimator": "grpo"}))
    write_episode(tmp_path, "r", "nan_loss", range(28, 31), "non-finite values in 3 metric(s)")
    got = rows_of(tmp_path, ["r"])["r"]
    episode = [(r["setting"], r["current_value"], r["suggested_value"]) for r in got if r["episode_id"] == 1]
    assert ("actor_rollout_ref.actor.grad_clip", "1.0", "0.5") in episode
    assert [(float(c), float(s)) for k, c, s in episode if k == "actor_rollout_ref.actor.optim.lr"] == [(1e-6, 5e-7)]
    assert {r["kind"] for r in got} <= {"config", "env", "check"}
    assert all(r["source"].startswith("https://") for r in got)
    for r in got:
        if r["current_value"] is not None and r["suggested_value"] is not None:
            assert float(r["suggested_value"]) != float(r["current_value"]), r


def test_a_default_the_run_already_uses_is_not_suggested(tmp_path):
    """resume_mode: verl's default is auto. Set to auto (real log 08) or not shown: no row; set to disable: auto."""
    write_run(tmp_path, "auto", "interrupted", None, config(trainer__resume_mode="auto", trainer__save_freq=20))
    write_run(tmp_path, "unset", "interrupted", None, config(trainer__save_freq=20))
    write_run(tmp_path, "off", "interrupted", None, config(trainer__resume_mode="disable", trainer__save_freq=20))
    got = rows_of(tmp_path, ["auto", "unset", "off"])
    assert not [r for r in got["auto"] + got["unset"] if r["setting"] == "trainer.resume_mode"]
    assert [(r["current_value"], r["suggested_value"]) for r in got["off"] if r["setting"] == "trainer.resume_mode"] \
        == [("disable", "auto")]


def test_no_critic_knob_without_a_critic(tmp_path):
    """GRPO has no critic (verl builds one for GAE only): a NaN episode there gets no critic.* row; with GAE it does."""
    for rid, estimator in (("grpo", "grpo"), ("gae", "gae")):
        write_run(tmp_path, rid, "nan_divergence", "update_actor",
                  config(**{"algorithm__adv_estimator": estimator, C + "grad_clip": 1.0, A + "grad_clip": 1.0}))
        write_episode(tmp_path, rid, "nan_loss", range(5, 8))
    got = rows_of(tmp_path, ["grpo", "gae"])
    assert not [r for r in got["grpo"] if (r["setting"] or "").startswith("critic.")]
    assert ("critic.grad_clip", "1.0", "0.5") in [(r["setting"], r["current_value"], r["suggested_value"])
                                                  for r in got["gae"]]


def test_memory_pressure_never_moves_a_memory_knob_up(tmp_path):
    """gpu_memory_utilization 0.4 (the demo's OOM run): under memory pressure nothing suggests raising it."""
    ids = []
    for k, util in enumerate((0.4, 0.6, 0.9)):
        ids.append(f"m{k}")
        write_run(tmp_path, ids[-1], "cuda_oom", "update_actor",
                  config(**{R + "name": "vllm", R + "gpu_memory_utilization": util, A + "ppo_micro_batch_size_per_gpu": 8,
                            R + "max_num_seqs": 1024}))
        write_episode(tmp_path, ids[-1], "memory_pressure", range(37, 45), "mem_reserved_gb 92.7 GB")
    got = rows_of(tmp_path, ids)
    moved = 0
    for rows in got.values():
        for r in rows:
            if r["episode_id"] == 1 and any(k in (r["setting"] or "") for k in MEMORY_KNOBS) and r["current_value"]:
                assert float(r["suggested_value"]) < float(r["current_value"]), r
                moved += 1
    assert moved
    assert ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.9", "0.8") in [
        (r["setting"], r["current_value"], r["suggested_value"]) for r in got["m2"]]


def test_preemption_never_raises_max_num_seqs(tmp_path):
    """vLLM preempting with max_num_seqs 1024: fewer sequences and more KV cache, never more sequences."""
    write_run(tmp_path, "r", "completed", None,
              config(**{R + "name": "vllm", R + "max_num_seqs": 1024, R + "gpu_memory_utilization": 0.7}),
              findings=("kv_cache_too_small",))
    write_episode(tmp_path, "r", "gen_slowdown", range(9, 20))
    got = {r["setting"]: r["suggested_value"] for r in rows_of(tmp_path, ["r"])["r"] if r["setting"]}
    assert got["actor_rollout_ref.rollout.max_num_seqs"] == "512"
    assert got["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.8"


def test_an_sglang_run_gets_no_vllm_keys(tmp_path):
    """Real log 23 (SGLang engine error) and a preempting SGLang episode: no vLLM-only key or variable."""
    vllm_only = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "VLLM_")
    for rid, engine in (("sglang", "sglang"), ("vllm", "vllm")):
        write_run(tmp_path, rid, "vllm_engine_error", "startup",
                  config(**{R + "name": engine, R + "max_num_seqs": 256, R + "max_num_batched_tokens": 8192}),
                  "RuntimeError: No backend type associated with device type cpu", findings=("kv_cache_too_small",))
        write_episode(tmp_path, rid, "gen_slowdown", range(3, 9))
    got = rows_of(tmp_path, ["sglang", "vllm"])
    assert not [r for r in got["sglang"] if any(k in (r["setting"] or "") for k in vllm_only)]
    assert [r for r in got["vllm"] if any(k in (r["setting"] or "") for k in vllm_only)]


def test_a_tpu_run_gets_no_nccl_advice(tmp_path):
    """Real log 12 (a TPU run stuck compiling): the device from trainer.device or from the log's own lines."""
    write_run(tmp_path, "tpu_cfg", "hang", "gen", config(trainer__device="tpu"),
              hang_reason="no progress for 40.0 min after step 0")
    write_run(tmp_path, "tpu_log", "hang", "gen", config(), hang_reason="no progress for 40.0 min after step 0")
    write_lines(tmp_path, "tpu_log", ["WARNING:2025-07-18 19:09:05,969:libtpu.so and TPU device found. "
                                      "Setting PJRT_DEVICE=TPU."])
    write_run(tmp_path, "gpu", "hang", "gen", config(), hang_reason="no progress for 40.0 min after step 0")
    got = rows_of(tmp_path, ["tpu_cfg", "tpu_log", "gpu"])
    for rid in ("tpu_cfg", "tpu_log"):
        assert got[rid], rid
        assert not [r for r in got[rid] if "NCCL" in (r["setting"] or "")], rid
    assert [r for r in got["gpu"] if "NCCL" in (r["setting"] or "")]


def test_every_anomaly_class_gets_advice_for_its_episode(tmp_path):
    from pipeline.vocabulary import ANOMALY_CLASSES
    for cls in ANOMALY_CLASSES:
        write_run(tmp_path, cls, "completed", None, config())
        write_episode(tmp_path, cls, cls, range(10, 13))
    got = rows_of(tmp_path, list(ANOMALY_CLASSES))
    assert all(any(r["episode_id"] == 1 for r in got[c]) for c in ANOMALY_CLASSES), \
        [c for c in ANOMALY_CLASSES if not got[c]]


def test_a_key_the_runs_verl_does_not_have_is_not_suggested(tmp_path):
    """The config dump shows the actor's section without entropy_coeff: this verl has no such key, so an entropy
    collapse does not suggest it; a dump that has it at 0 gets 0.001 (verl's entropy bonus, off at 0)."""
    actor = {"grad_clip": 1.0, "optim": {"lr": 1e-6}}
    write_run(tmp_path, "without", "completed", None, {"actor_rollout_ref": {"actor": actor}})
    write_run(tmp_path, "with", "completed", None, {"actor_rollout_ref": {"actor": {**actor, "entropy_coeff": 0}}})
    for rid in ("without", "with"):
        write_episode(tmp_path, rid, "entropy_collapse", range(30, 40))
    got = {rid: {r["setting"]: r["suggested_value"] for r in rows if r["setting"]}
           for rid, rows in rows_of(tmp_path, ["without", "with"]).items()}
    assert "actor_rollout_ref.actor.entropy_coeff" not in got["without"]
    assert got["with"]["actor_rollout_ref.actor.entropy_coeff"] == "0.001"
