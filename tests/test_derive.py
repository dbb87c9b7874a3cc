"""Derive tables on small hand-made lakes: exact values, shares, failure classes and root-cause lines."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa
import pytest

from pipeline import derive
from pipeline.lake import connect
from tests.test_derive_helpers import RunBuilder, timings

OOM_TEXT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 13.91 GiB. GPU 0 has a total capacity "
            "of 79.11 GiB of which 8.85 GiB is free.")


def oom_run() -> RunBuilder:
    b = RunBuilder("oom-a", total_training_steps=5, gpu_memory_utilization=0.9)
    b.line("{'actor_rollout_ref': {'rollout': {'gpu_memory_utilization': 0.9,", "config")
    b.line("Total training steps: 5")
    for s in (1, 2, 3):
        b.step(s, timings())
    b.line("(WorkerDict pid=7) Traceback (most recent call last):", "error")
    b.line('(WorkerDict pid=7)   File "/verl/workers/fsdp_workers.py", line 893, in compute_log_prob', "error",
           phase="old_log_prob")
    oom_line = b.line("(WorkerDict pid=7) " + OOM_TEXT, "error")
    b.line("Error executing job with overrides: ['algorithm.adv_estimator=grpo']", "error")
    b.line("Traceback (most recent call last):", "error")
    b.line("ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunner.run() (pid=1, ip=10.0.0.1)", "error")
    b.line(OOM_TEXT, "error")
    b.line("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "error")
    b.oom_line = oom_line
    return b


def completed_run() -> RunBuilder:
    b = RunBuilder("done-b", total_training_steps=4)
    t0 = datetime(2026, 11, 2, 8, 0, 0)
    for s in (1, 2, 3, 4):
        b.line(f"INFO:{t0 + timedelta(seconds=30 * s)}:step begins", ts=t0 + timedelta(seconds=30 * s))
        b.step(s, timings(gen=12.0 + s))
    b.line("(raylet) A worker died or was killed while executing a task by an unexpected system error. "
           "Worker exit type: SYSTEM_ERROR. The process receives a SIGTERM.", "error")
    return b


def hang_run() -> RunBuilder:
    b = RunBuilder("hang-c", total_training_steps=10)
    b.step(1, timings())
    b.step(2, timings(**{"actor/pg_loss": float("nan"), "actor/grad_norm": float("inf")}))
    b.line("(WorkerDict pid=9) DEBUG:2026-11-02 08:00:00,000:dp actor Before update_policy, memory allocated (GB): "
           "40.00, memory reserved (GB): 44.00, device memory used/total (GB): 50.00/80.00", "memory",
           phase="update_actor", ts=datetime(2026, 11, 2, 8, 0))
    b.line("(WorkerDict pid=10) DEBUG:2026-11-02 08:00:00,000:dp actor Before update_policy, memory allocated (GB): "
           "20.00, memory reserved (GB): 24.00, device memory used/total (GB): 30.00/80.00", "memory",
           phase="update_actor", ts=datetime(2026, 11, 2, 8, 0))
    # 45 minutes later the same worker is still waiting (its own clock): the stall the hang is read from
    b.line("(WorkerDict pid=10) WARNING 11-02 08:45:00 [ray] still waiting for update_policy's collective", "warning",
           phase="update_actor")
    return b


def resumed_run() -> RunBuilder:
    b = RunBuilder("resume-d", total_training_steps=6)
    for s in (1, 2, 3):
        b.step(s, timings())
    b.line("(TaskRunner pid=100) Killed", "error")
    b.restart()
    b.step(2, {"val-core/gsm8k/acc/mean@1": 0.4})
    for s in (3, 4, 5, 6):
        b.step(s, timings(update_actor=9.0))
    return b


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    wh = tmp_path_factory.mktemp("wh")
    builders = [oom_run(), completed_run(), hang_run(), resumed_run()]
    for b in builders:
        b.write(wh)
    counts = derive.derive_run_tables(wh, [b.run_id for b in builders])
    fleet = derive.derive_fleet_tables(wh)
    return wh, {b.run_id: b for b in builders}, counts, fleet


def summary(wh, run_id):
    con = connect(wh)
    cur = con.execute("select * from run_summary where run_id = $r", {"r": run_id})
    cols = [d[0] for d in cur.description]
    return dict(zip(cols, cur.fetchone(), strict=True))


def test_sql_files_exist_and_group_by_all():
    for name in derive.RUN_TABLES + derive.FLEET_TABLES:
        text = derive.sql_text(name)
        assert "group by all" in text or "group by" not in text


@pytest.mark.parametrize("name", derive.RUN_TABLES)
def test_each_per_run_sql_over_derives_views_of_two_runs_gives_their_rows_only(warehouse, name):
    """Over the views derive makes for two of the four runs, a per-run table's SQL returns rows of those two
    only, the same rows as its partitions of them: the views, not the SQL, hold a batch to its runs."""
    wh, runs, _, _ = warehouse
    asked = sorted(runs)[:2]
    con = derive._connect(wh, [name], asked)
    try:
        got = con.execute(f"select * from ({derive.sql_text(name)}) order by all", derive._params(name))
        cols = [d[0] for d in got.description]
        got = got.fetchall()
    finally:
        con.close()
    con = connect(wh)
    try:
        picks = ", ".join(f'"{c}"' for c in cols)
        kept = con.execute(f"select {picks} from {name} "
                           "where run_id in (select unnest($ids)) order by all", {"ids": asked}).fetchall()
    finally:
        con.close()
    assert {r[cols.index("run_id")] for r in got} <= set(asked)
    assert len(got) == len(kept) and repr(got) == repr(kept)


def test_thresholds_are_bound_not_written_into_the_sql(tmp_path):
    for name, values in derive.default_thresholds().items():
        text = derive.sql_text(name)
        assert "$thresholds" in text
        for key in values:
            assert key in text, (name, key)
    b = oom_run()
    b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["oom-a"])

    def found() -> set[str]:
        return {f for (f,) in connect(tmp_path).execute("select finding from config_findings").fetchall()}

    assert "gpu_memory_utilization_high_with_oom" in found()
    derive.derive_run_tables(tmp_path, ["oom-a"], {"config_findings": {"safe_gpu_memory_utilization": 0.95}})
    assert "gpu_memory_utilization_high_with_oom" not in found()
    with pytest.raises(ValueError, match="safe_gpu_memory_utilisation"):
        derive.derive_run_tables(tmp_path, ["oom-a"], {"config_findings": {"safe_gpu_memory_utilisation": 0.9}})


def test_counts_and_catalog(warehouse):
    wh, builders, counts, fleet = warehouse
    assert counts["step_phases"] == 3 + 4 + 2 + 6
    assert counts["run_summary"] == 4
    assert fleet["fleet_daily"] >= 1
    con = duckdb.connect(str(wh / "warehouse.duckdb"), read_only=True)
    views = {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    assert set(derive.RUN_TABLES + derive.FLEET_TABLES) <= views


def test_phase_columns_equal_timers_and_shares_sum_to_one(warehouse):
    wh, builders, _, _ = warehouse
    con = connect(wh)
    rows = con.execute("select * from step_phases where run_id = 'done-b' order by step").fetchall()
    cols = [d[0] for d in con.description]
    for row in rows:
        r = dict(zip(cols, row, strict=True))
        assert r["gen"] == 12.0 + r["step"]
        assert r["update_actor"] == 8.0
        assert math.isclose(r["other_time"], 0.5)
        shares = sum(v for k, v in r.items() if k.startswith("share_") and v is not None)
        assert math.isclose(shares, 1.0, abs_tol=1e-9)
        assert r["bottleneck_phase"] == "gen"
        # no logged per-token times: gen per response token (mean length x batch x n), like verl
        assert math.isclose(r["tpt_gen"], r["gen"] * 1000 / (200.0 * 64 * 4))
        assert math.isclose(r["tpt_update_actor"], 8.0 * 1000 / 40000)
        assert r["throughput"] == pytest.approx(40000 / (r["step_time"] * 8))
    walls = [dict(zip(cols, row, strict=True))["wall_time_s"] for row in rows]
    assert walls == [None, 30.0, 30.0, 30.0]
    # the clock the report's wall-clock chart draws: the step line's time as UTC epoch seconds, 30 s apart
    ends = [(r["step_ts"], r["step_end_s"]) for r in (dict(zip(cols, row, strict=True)) for row in rows)]
    assert [e for ts, e in ends] == [ts.replace(tzinfo=UTC).timestamp() for ts, _ in ends]
    assert [b - a for (_, a), (_, b) in zip(ends, ends[1:], strict=False)] == [30.0, 30.0, 30.0]


def test_every_verl_timer_has_its_column(tmp_path):
    names = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
             "update_weights", "testing", "save_checkpoint"]
    logged = {f"timing_s/{n}": float(i + 1) for i, n in enumerate(names)}
    b = RunBuilder("timers-h")
    b.step(1, {**logged, "timing_s/step": 100.0})
    b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["timers-h"])
    con = connect(tmp_path)
    row = con.execute(f"select {', '.join(names)}, step_time, other_time, bottleneck_phase from step_phases").fetchone()
    assert row[:11] == tuple(float(i + 1) for i in range(11)) and row[11] == 100.0
    # testing and save_checkpoint run outside timing_s/step, so they are not part of its rest
    inside = sum(float(i + 1) for i, n in enumerate(names) if n not in ("testing", "save_checkpoint"))
    assert math.isclose(row[12], 100.0 - inside) and row[13] == "update_weights"


def test_resumed_run_keeps_later_segment(warehouse):
    wh, _, _, _ = warehouse
    con = connect(wh)
    got = con.execute("select step, segment, update_actor from step_phases where run_id = 'resume-d' order by step"
                      ).fetchall()
    assert got == [(1, 0, 8.0), (2, 0, 8.0), (3, 1, 9.0), (4, 1, 9.0), (5, 1, 9.0), (6, 1, 9.0)]
    s = summary(wh, "resume-d")
    assert s["failure_class"] == "completed" and s["last_step"] == 6 and s["resume_count"] == 1
    # step 3 ran twice: the first attempt is wasted
    assert 0 < s["goodput"] < 1


def test_oom_run_summary(warehouse):
    wh, builders, _, _ = warehouse
    s = summary(wh, "oom-a")
    assert s["failure_class"] == "cuda_oom"
    assert s["last_step"] == 3 and s["expected_steps"] == 5
    assert s["completion"] == pytest.approx(0.6)
    assert (s["root_cause_file"], s["root_cause_line_no"]) == ("train.log", builders["oom-a"].oom_line)
    assert s["root_cause_text"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert s["failure_phase"] == "old_log_prob"
    assert s["bottleneck_phase"] == "gen"
    assert s["median_step_s"] == pytest.approx(25.0)


def test_completed_run_ignores_shutdown_noise(warehouse):
    wh, _, _, _ = warehouse
    s = summary(wh, "done-b")
    assert s["failure_class"] == "completed" and s["last_step"] == 4
    assert s["root_cause_text"] is None


def test_hang_names_phase(warehouse):
    wh, _, _, _ = warehouse
    s = summary(wh, "hang-c")
    assert s["failure_class"] == "hang" and s["last_step"] == 2 and s["failure_phase"] == "update_actor"
    assert s["hang_duration_s"] == 45 * 60 and "45.0 min" in s["hang_reason"]


def test_run_events_classes(warehouse):
    wh, builders, _, _ = warehouse
    con = connect(wh)
    got = dict(con.execute("select message, event_class from run_events where run_id = 'oom-a'").fetchall())
    assert got[OOM_TEXT] == "cuda_oom"
    assert got["Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."] == "hydra_wrapper"
    assert got["Traceback (most recent call last):"] == "traceback"
    assert any(v == "ray_task_error:OutOfMemoryError" for v in got.values())
    phases = dict(con.execute("select line_no, phase from run_events where run_id = 'oom-a'").fetchall())
    assert phases[builders["oom-a"].oom_line] == "old_log_prob"


def test_config_findings(warehouse):
    wh, _, _, _ = warehouse
    con = connect(wh)
    found = {(r, f) for r, f in con.execute("select run_id, finding from config_findings").fetchall()}
    assert ("oom-a", "gpu_memory_utilization_high_with_oom") in found
    assert ("hang-c", "memory_imbalance") in found
    ev = con.execute("select evidence_line_no, evidence_text from config_findings "
                     "where finding = 'gpu_memory_utilization_high_with_oom'").fetchone()
    assert ev[0] == 1 and "gpu_memory_utilization" in ev[1]


def test_step_health(warehouse):
    wh, _, _, _ = warehouse
    con = connect(wh)
    r = con.execute("select ppo_kl, entropy, grad_norm, score_mean, has_nan from step_health "
                    "where run_id = 'oom-a' and step = 1").fetchone()
    assert r == (0.001, 0.4, 0.3, 0.5, False)
    val = con.execute("select val_core_mean from step_health where run_id = 'resume-d' and step = 2").fetchone()
    assert val == (0.4,)
    # NaN and inf are seen even though Parquet statistics leave them out
    nan = con.execute("select step, has_nan, nan_keys from step_health where run_id = 'hang-c' order by step").fetchall()
    assert nan == [(1, False, None), (2, True, ["actor/grad_norm", "actor/pg_loss"])]


def test_step_health_maps_old_verl_names_and_keeps_them(tmp_path):
    """Early-2025 verl logged `actor/entropy_loss`, `critic/kl` and `critic/kl_coeff` (reference, section 1.3)."""
    b = RunBuilder("old-g")
    b.step(1, {"actor/entropy_loss": 1.25, "critic/kl": 0.003, "critic/kl_coeff": 0.001, "mfu/actor": 0.3,
               "val/test_score/openai/gsm8k": 0.5, "timing_s/step": 10.0})
    b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["old-g"])
    row = connect(tmp_path).execute(
        "select entropy, reward_kl, reward_kl_coef, val_core_mean, verl_values from step_health").fetchone()
    assert row[:4] == (1.25, 0.003, 0.001, 0.5)
    assert row[4] == {"actor/entropy_loss": 1.25, "critic/kl": 0.003, "critic/kl_coeff": 0.001,
                      "val/test_score/openai/gsm8k": 0.5}


def test_phase_shares_are_one_column_per_timer_inside_the_step(warehouse):
    """step_phases and fleet_config_groups carry a share for each verl timer inside `timing_s/step` (the
    design's list, testing and save_checkpoint excluded) and one for the rest of the step; a group's shares
    add up to 1 and its bottleneck is the phase with the largest share."""
    inside = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor",
              "update_weights"]
    wh, _, _, _ = warehouse
    con = connect(wh)
    for table in ("step_phases", "fleet_config_groups"):
        columns = [c for (c, *_) in con.execute(f"describe {table}").fetchall() if c.startswith("share_")]
        assert columns == [f"share_{p}" for p in inside] + ["share_other"], table
    [row] = con.execute(f"select {', '.join(f'share_{p}' for p in inside)}, share_other, bottleneck_phase "
                        "from fleet_config_groups").fetchall()
    assert math.isclose(sum(v or 0 for v in row[:-1]), 1.0)
    assert row[-1] == inside[max(range(len(inside)), key=lambda i: row[i] or 0)]


def test_fleet_tables(warehouse):
    wh, _, _, _ = warehouse
    con = connect(wh)
    total = con.execute("select sum(runs), sum(cuda_oom), sum(hang), sum(completed) from fleet_daily").fetchone()
    assert total == (4, 1, 1, 2)
    groups = con.execute("select runs, steps from fleet_config_groups").fetchall()
    assert groups == [(4, 15)]
    base = con.execute("select count(*) from run_baselines").fetchone()
    assert base == (4,)


def test_rederiving_one_run_replaces_only_its_partition(tmp_path):
    no_steps = RunBuilder("nosteps-e", total_training_steps=3)
    no_steps.line("Total training steps: 3", "config")
    for b in (completed_run(), no_steps):
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["done-b", "nosteps-e"])
    assert derive.derive_run_table(tmp_path, "step_phases", ["nosteps-e"]) == 0
    assert (tmp_path / "step_phases" / "run_id=nosteps-e" / "part-0.parquet").is_file()
    con = connect(tmp_path)
    assert con.execute("select run_id, count(*) from step_phases group by all").fetchall() == [("done-b", 4)]
    assert con.execute("select failure_class, last_step from run_summary where run_id = 'nosteps-e'").fetchone() == (
        "no_outcome", 0)
    assert not list((tmp_path / "step_phases").glob(".staging-*"))


def test_rollout_tp_and_n_as_the_engine_ran_them(tmp_path):
    """The config asks tp=2, n=4 (RunBuilder's defaults); the engine's own lines say what it ran."""
    engine = ("(WorkerDict pid=11) INFO:2026-03-26 21:59:06,589:Initializing a V1 LLM engine with config: "
              "model='/models/Qwen2.5-7B', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size={tp}, "
              "pipeline_parallel_size=1, data_parallel_size=1")
    sampling = ("(WorkerDict pid=11) kwargs: {{'n': {n}, 'logprobs': 1, 'max_tokens': 256, 'detokenize': False, "
                "'temperature': 1.0}}")
    off, fine = RunBuilder("off-e"), RunBuilder("fine-f")
    for b, tp, n in ((off, 1, 8), (fine, 2, 4)):
        b.line(engine.format(tp=tp))
        b.line(sampling.format(n=n))
        b.step(1, timings())
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["off-e", "fine-f"])
    rows = connect(tmp_path).execute(
        "select run_id, finding, message, evidence_line_no from config_findings "
        "where finding in ('rollout_tp_mismatch', 'rollout_n_mismatch') order by finding").fetchall()
    assert [(r[0], r[1], r[3]) for r in rows] == [("off-e", "rollout_n_mismatch", 2), ("off-e", "rollout_tp_mismatch", 1)]
    assert "n=4" in rows[0][2] and "n=8" in rows[0][2]
    assert "tensor_model_parallel_size=2" in rows[1][2] and "started with 1" in rows[1][2]


def test_a_breakpoint_passed_long_before_the_stop_is_not_the_reason(tmp_path):
    early, paused = RunBuilder("early-i", total_training_steps=10), RunBuilder("paused-j", total_training_steps=10)
    early.line("(TaskRunner pid=5) Ray debugger is listening on 127.0.0.1:35523")
    for s in (1, 2, 3):
        early.step(s, timings())
        paused.step(s, timings())
    at = paused.line("(TaskRunner pid=5) Waiting for debugger to attach (see https://docs.ray.io/...)...")
    for b in (early, paused):
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["early-i", "paused-j"])
    rows = dict(((r, (c, p, h, n)) for r, c, p, h, n in connect(tmp_path).execute(
        "select run_id, failure_class, failure_phase, hang_reason, root_cause_line_no from run_summary").fetchall()))
    assert rows["early-i"][:3] == ("no_outcome", None, None)
    assert rows["paused-j"][:2] == ("hang", "gen") and "debugger" in rows["paused-j"][2]
    assert rows["paused-j"][3] == at


def test_goodput_counts_only_steps_a_checkpoint_kept(tmp_path):
    """Each step takes 25 s (timers sum 24.5 + 0.5 other). `saved` checkpoints at step 2 (5 s) and dies in
    step 4 with an OOM: 55 s of its 105 s survive and 2 steps are lost. `unsaved` never checkpoints: all
    its 4 steps are lost, goodput 0. `done` completes: everything counts."""
    saved, unsaved = RunBuilder("saved-k", total_training_steps=10), RunBuilder("unsaved-l", total_training_steps=10)
    for s in (1, 2, 3, 4):
        saved.step(s, timings(**({"timing_s/save_checkpoint": 5.0} if s == 2 else {})))
        unsaved.step(s, timings())
    for b in (saved, unsaved):
        b.line(OOM_TEXT, "error")
        b.write(tmp_path)
    done = RunBuilder("done-m", total_training_steps=2)
    for s in (1, 2):
        done.step(s, timings())
    done.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["saved-k", "unsaved-l", "done-m"])
    got = {r[0]: r[1:] for r in connect(tmp_path).execute(
        "select run_id, failure_class, last_checkpoint_step, steps_lost, wall_time_s, goodput from run_summary"
    ).fetchall()}
    assert got["saved-k"][:4] == ("cuda_oom", 2, 2, 105.0) and got["saved-k"][4] == pytest.approx(55 / 105)
    assert got["unsaved-l"] == ("cuda_oom", None, 4, 100.0, 0.0)
    assert got["done-m"] == ("completed", None, 0, 50.0, 1.0)
    findings = {r for (r,) in connect(tmp_path).execute(
        "select run_id from config_findings where finding = 'no_checkpoint_before_failure'").fetchall()}
    assert findings == {"unsaved-l"}


def test_first_step_needs_a_longer_silence_than_later_steps(tmp_path):
    """After validation's step:0 no step time is known: vLLM lines that keep coming for 10 minutes may be a slow
    first rollout (no outcome), 20 minutes of them with no step is a stall (hang)."""
    for run_id, minutes in (("slow-n", 10), ("stuck-o", 20)):
        b = RunBuilder(run_id, total_training_steps=10)
        b.step(0, {"val-core/gsm8k/acc/mean@1": 0.4})
        for m in range(minutes + 1):
            b.line(f"(WorkerDict pid=3) INFO 11-02 08:{m:02d}:00 [metrics.py:1] Avg prompt throughput: 0.0 tokens/s",
                   "other")
        b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["slow-n", "stuck-o"])
    got = dict(connect(tmp_path).execute("select run_id, failure_class from run_summary").fetchall())
    assert got == {"slow-n": "no_outcome", "stuck-o": "hang"}


def test_bash_reporting_its_job_terminated_is_a_sigterm_stop(tmp_path):
    """The launch script's shell reports the killed trainer as `./run.sh: line 27: 61149 Terminated  python3 ...`
    (bash's job report for SIGTERM): the run was stopped, for that reason, on that line."""
    b = RunBuilder("bash-k", total_training_steps=10)
    for s in (1, 2, 3):
        b.step(s, timings())
    at = b.line('./run_grpo.sh: line 27: 61149 Terminated              python3 -m verl.trainer.main_ppo "$@"')
    b.write(tmp_path)
    derive.derive_run_tables(tmp_path, ["bash-k"])
    got = summary(tmp_path, "bash-k")
    assert (got["failure_class"], got["stop_reason"], got["root_cause_line_no"]) == ("interrupted", "sigterm", at)


def test_a_partition_swapped_under_the_query_is_read_again(tmp_path, monkeypatch):
    """Another process swaps a partition the query bound: DuckDB finds the file gone (here, the first time
    the query runs, a file that is not there). The query is bound again and the run's rows are written;
    an error of the SQL itself is raised at once."""
    b = completed_run()
    b.write(tmp_path)
    real = derive.sql_text
    calls = []

    def first_gone(name):
        calls.append(name)
        text = real(name)
        gone = f"from read_parquet('{tmp_path}/step_metrics/run_id=gone/part-0.parquet') as m"
        return text.replace("from step_metrics as m", gone, 1) if len(calls) == 1 else text

    monkeypatch.setattr(derive, "sql_text", first_gone)
    assert derive.derive_run_table(tmp_path, "step_phases", [b.run_id]) == 4
    assert calls == ["step_phases", "step_phases"]

    calls.clear()
    monkeypatch.setattr(derive, "sql_text", lambda name: calls.append(name) or "select from nowhere at all")
    with pytest.raises(duckdb.ParserException):
        derive.derive_run_table(tmp_path, "step_phases", [b.run_id])
    assert calls == ["step_phases"]


def _health(lengths: list[float], grad=None, nan_keys=None) -> pa.Table:
    n = len(lengths)
    return pa.table({
        "step": pa.array(range(1, n + 1), pa.int64()), "segment": pa.array([0] * n, pa.int32()),
        "response_length_mean": lengths,
        "entropy": [0.5] * n, "score_mean": [0.3] * n, "reward_mean": pa.array([None] * n, pa.float64()),
        "grad_norm": grad or [1.0] * n, "pg_loss": [0.1] * n, "kl_loss": pa.array([None] * n, pa.float64()),
        "vf_loss": pa.array([None] * n, pa.float64()),
        "nan_keys": pa.array(nan_keys or [None] * n, pa.list_(pa.string())),
    })


def test_training_outcome_is_a_failure_still_there_at_the_last_step(tmp_path):
    """Response length 1000 -> 50 from step 11 to the end: collapsed at 11. The same drop that recovers by step
    16, or only at the last step: no outcome. Gradients NaN from step 11 on: diverged at 11. A validation metric NaN at the end, or a
    collapse in a run of 4 steps (too few to know its first steps): no outcome."""
    from pipeline import lake

    nan = float("nan")
    runs = {
        "collapsed": _health([1000.0] * 10 + [50.0] * 10),
        "recovered": _health([1000.0] * 10 + [50.0] * 5 + [1000.0] * 5),
        "recovered_at_the_end": _health([1000.0] * 10 + [50.0] * 19 + [1000.0]),
        "diverged": _health([1000.0] * 12, grad=[1.0] * 10 + [nan] * 2,
                            nan_keys=[None] * 10 + [["actor/grad_norm", "actor/pg_loss"]] * 2),
        "val_nan": _health([1000.0] * 12, nan_keys=[None] * 11 + [["val-core/openai/gsm8k/reward/mean@1"]]),
        "short": _health([1000.0, 1000.0, 50.0, 50.0]),
    }
    for rid, health in runs.items():
        lake.write_run_table(tmp_path, "step_health", rid, health)
    derive.derive_run_table(tmp_path, "run_training", list(runs))
    got = dict(((r, (o, s)) for r, o, s in connect(tmp_path).execute(
        "select run_id, training_outcome, training_outcome_step from run_training").fetchall()))
    assert got == {"collapsed": ("collapsed", 11), "diverged": ("diverged", 11)}


def test_a_divergence_story_starts_at_its_first_non_finite_step(tmp_path):
    """grad_norm went inf at step 5 and recovered at 6; from step 7 loss and gradient stayed NaN until the
    sampler crashed after step 8. The run's first cause in time is step 7's line, shown before the crash."""
    from pipeline.report.render import render_run_report
    from tests.report_fixtures import parse_html

    b = RunBuilder("nan-a", total_training_steps=10)
    for s in range(1, 5):
        b.step(s, timings())
    b.step(5, timings(**{"actor/grad_norm": math.inf}))
    b.step(6, timings())
    b.step(7, timings(**{"actor/grad_norm": math.nan, "actor/pg_loss": math.nan}))
    onset = len(b.lines)  # step 7's line
    b.step(8, timings(**{"actor/grad_norm": math.nan, "actor/pg_loss": math.nan}))
    b.line("(WorkerDict pid=7) Traceback (most recent call last):", "error")
    crash = b.line("(WorkerDict pid=7) RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
                   "error")
    b.write(tmp_path / "wh")
    derive.derive_run_tables(tmp_path / "wh", ["nan-a"])
    row = summary(tmp_path / "wh", "nan-a")
    assert row["failure_class"] == "nan_divergence" and row["root_cause_line_no"] == crash
    assert (row["onset_step"], row["onset_file"], row["onset_line_no"]) == (7, "train.log", onset)
    assert list(row["onset_keys"]) == ["actor/grad_norm", "actor/pg_loss"]
    html = render_run_report(tmp_path / "wh", "nan-a", tmp_path / "rep").read_text(encoding="utf-8")
    assert parse_html(html).find("span", id_="onset-location").text() == f"train.log:{onset}"
    assert html.index('id="onset-context"') < html.index('id="root-cause-context"')
    # the curves mark every step that logged a NaN/inf, the recovered one too
    assert set(re.findall(r'class="nan"[^>]*><title>NaN/inf logged at step (\d+)<', html)) == {"5", "7", "8"}
