"""Problems of single lines are summarised per file and kind in `runs.problems`, not listed one by one."""

from __future__ import annotations

from tests.test_ingest_helpers import ingest_text

# a hard-wrapped metric line whose `step:N - ` start was lost (as in real log 27): its pairs have no step
ORPHAN = "actor/entropy:0.41 - actor/pg_loss:0.02 - critic/score/mean:0.5"


def test_repeated_line_problem_is_one_entry_with_count_and_lines(tmp_path):
    lines = ["step:1 - actor/entropy:0.5 - actor/pg_loss:0.01"]
    for _ in range(7):
        lines += ["some other output", ORPHAN]
    run = ingest_text(tmp_path, "\n".join(lines) + "\n")
    problems = run.run["problems"]
    # the orphans are lines 3, 5, 7, ... 15 of the file: seven of them, the first five named
    assert problems == ["run-a.log: metric pairs without a step number (a wrapped step line whose start is "
                        "missing): 7 lines (at lines 3, 5, 7, 9, 11, ...)"]


def test_single_line_problem_keeps_its_line_and_detail(tmp_path):
    run = ingest_text(tmp_path, "step:1 - actor/entropy:0.5\nnoise\n" + ORPHAN + "\n")
    assert run.run["problems"] == ["run-a.log:3: metric pairs without a step number (a wrapped step line whose "
                                   "start is missing): about 3 pairs not attributed"]


def test_config_is_the_last_dump_that_parses(tmp_path):
    """Three start-ups: the last dump is cut off mid-way, so the second one's settings are the run's."""
    from tests.test_ingest_formats import CONFIG

    cut = CONFIG.split("\n")[0] + "\n"  # the dump's first line only: its brackets never close
    text = (CONFIG % ("1", 10) + "step:1 - a:1.0\n" + CONFIG % ("2", 20) + "step:1 - a:2.0\n"
            + cut + "step:1 - a:3.0\n")
    run = ingest_text(tmp_path, text)
    assert run.run["experiment_name"] == "e2" and run.run["total_training_steps"] == 20
    assert [p for p in run.run["problems"] if "config pprint" in p] == [
        "config pprint not closed after 1 lines (log truncated?)"]


WANDB_CONFIG_YAML = """_wandb:
    value:
        cli_version: "0.19.8"
actor_rollout_ref:
    value:
        actor:
            optim:
                lr: 1e-06
                total_training_steps: 42
        rollout:
            gpu_memory_utilization: 0.55
            name: vllm
trainer:
    value:
        experiment_name: wandb-run
        total_training_steps: null
"""


def test_wandb_run_folder_takes_its_config_from_config_yaml(tmp_path):
    """A W&B capture starts after verl printed its config: the run's config.yaml (W&B's {value: ...} form)
    supplies it, and the total verl computed (written into the optimizer's config) is the expected steps."""
    from tests.test_ingest_helpers import ingest_root

    files = tmp_path / "archive" / "run-w" / "wandb" / "run-20251104_063305-gkn3gtx6" / "files"
    files.mkdir(parents=True)
    (files / "output.log").write_text("step:1 - actor/entropy:0.5\nstep:2 - actor/entropy:0.4\n")
    (files / "config.yaml").write_text(WANDB_CONFIG_YAML)
    run = ingest_root(tmp_path / "archive", tmp_path / "wh")["run-w"]
    assert run.run["experiment_name"] == "wandb-run"
    assert run.run["gpu_memory_utilization"] == 0.55 and run.run["rollout_engine"] == "vllm"
    assert run.run["total_training_steps"] == 42


def test_a_key_given_twice_on_a_step_line_keeps_its_last_value(tmp_path):
    from pipeline.derive import derive_run_table

    text = ("step:1 - actor/entropy:0.5 - actor/entropy:0.6 - timing_s/step:10.0\n"
            "step:2 - actor/entropy:0.4 - timing_s/step:11.0\n")
    run = ingest_text(tmp_path, text)
    entropy = sorted((m["step"], m["value"]) for m in run.metrics if m["key"] == "actor/entropy")
    assert entropy == [(1, 0.6), (2, 0.4)]
    assert run.run["problems"] == ["run-a.log:1: metric key given twice on one step line: actor/entropy "
                                   "(the last value kept)"]
    # step_health builds a map of the verl keys per step, which a repeated key broke
    assert derive_run_table(tmp_path / "wh", "step_health", ["run-a"]) == 2
