"""Every table of the warehouse, declared once: its layer, what it reads, its contract columns, what it holds.

The lake, derive, the assets and their checks, the jobs, publishing and docs/architecture.md read this
list. Adding a table is one `Table(...)` entry here plus what writes it: `sql/<name>.sql` for a table
with `writer="sql"` (derive and its asset follow from the entry), or a Python asset for any other.
Entries are in dependency order: a table reads only tables declared before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.vocabulary import AFTER_STEP_PHASES, STEP_PHASES

LAYERS = ("raw", "derived", "fleet")
INGEST = "pipeline.ingest.ingest_run"  # the writer of the tables the ingest asset yields
# The fitted anomaly model (<warehouse>/models/): not a table, but tables read it like one.
MODEL = "anomaly_model"
# The verl timers that step_phases has a column for (`timing_s/step` is `step_time`: `step` is the step number)
TIMER_PHASES = (*STEP_PHASES, *AFTER_STEP_PHASES)


@dataclass(frozen=True)
class Table:
    """One warehouse table.

    `layer`: raw (ingested from the logs), derived (computed per run) or fleet (computed over every run,
    rewritten whole). `writer`: "sql" for `sql/<name>.sql`, else the function that writes it.
    `contract`: the columns other tools may rely on (../shared/DESIGN.md). `stand_in`: the columns
    (with types) the SQL reads, so derive can stand in an empty table where a warehouse has none.
    """

    name: str
    layer: str
    writer: str
    reads: tuple[str, ...]
    contract: tuple[str, ...]
    description: str
    stand_in: str = ""

    @property
    def per_run(self) -> bool:
        """Whether the table is hive-partitioned by run_id (else one file for the fleet)."""
        return self.layer != "fleet"


TABLES = (
    Table(
        "runs", "raw", INGEST, (),
        ("run_id", "source_path", "n_files", "n_lines", "n_bytes"),
        "One row per run: source, sizes, problems and config facts.",
        stand_in=(
            "run_id varchar, source_path varchar, n_lines bigint, n_segments integer, n_metric_values bigint,"
            " n_parse_failures bigint, first_ts timestamp, last_ts timestamp, mtime timestamp,"
            " ingested_at timestamp, project_name varchar, experiment_name varchar, model_path varchar,"
            " rollout_engine varchar, n_gpus_per_node bigint, nnodes bigint, rollout_n bigint,"
            " rollout_tp bigint, train_batch_size bigint, ppo_mini_batch_size bigint,"
            " ppo_micro_batch_size_per_gpu bigint, total_training_steps bigint,"
            " gpu_memory_utilization double, config_json varchar, problems varchar[]"
        ),
    ),
    Table(
        "log_lines", "raw", INGEST, (),
        ("run_id", "file", "line_no", "text", "kind"),
        "Every input line with file, line number and kind.",
        stand_in=(
            "run_id varchar, file varchar, line_no bigint, text varchar, kind varchar, component varchar,"
            " pid bigint, segment integer, step bigint, phase_hint varchar, ts timestamp"
        ),
    ),
    Table(
        "step_metrics", "raw", INGEST, (),
        ("run_id", "step", "key", "value", "source", "segment"),
        "One value per (step, key), with source and resume segment.",
        stand_in=(
            "run_id varchar, step bigint, key varchar, value double, source varchar, segment integer,"
            " file varchar, line_no bigint"
        ),
    ),
    Table(
        "run_launches", "derived", "sql", ("runs", "log_lines"),
        ("run_id", "launch_segment"),
        "Per run: the resume segment its log's last launch begins with (0 where the log holds one run), the runs"
        " earlier launches left in the same log, and the last launch's first step line and its file.",
        stand_in=(
            "run_id varchar, launch_segment integer, earlier_runs bigint, launch_first_line_no bigint,"
            " launch_file varchar"
        ),
    ),
    Table(
        "step_phases", "derived", "sql", ("runs", "log_lines", "step_metrics", "run_launches"),
        ("run_id", "step", *TIMER_PHASES, "step_time", "bottleneck_phase"),
        "Per step: every verl timer, shares of the step, bottleneck and throughput.",
        stand_in="run_id varchar, step bigint, segment integer, "
                 + ", ".join(f'"{p}" double' for p in (*TIMER_PHASES, "step_time"))
                 + ", bottleneck_phase varchar, step_ts timestamp",
    ),
    Table(
        "step_health", "derived", "sql", ("step_metrics", "run_launches"),
        (),
        "Per step: reward, KL, entropy, losses, grad norm, lengths, memory.",
        stand_in=(
            "run_id varchar, step bigint, score_mean double, reward_mean double, kl_loss double, entropy double,"
            " pg_loss double, grad_norm double, vf_loss double, response_length_mean double, nan_keys varchar[]"
        ),
    ),
    Table(
        "run_events", "derived", "sql", ("log_lines",),
        ("run_id", "file", "line_no", "event_class", "component", "message"),
        "Every error and warning with its class, component, step and phase.",
        stand_in=(
            "run_id varchar, file varchar, line_no bigint, segment integer, kind varchar, event_class varchar,"
            " message varchar, ts timestamp, order_ts timestamp"
        ),
    ),
    Table(
        "run_files", "derived", "sql", ("log_lines",),
        ("run_id", "file", "side_file", "is_main"),
        "Per file of a run: its lines, its last line's number, last clock and last resume segment, whether it is a"
        " logger's side file, and whether it is the driver log.",
    ),
    Table(
        "run_progress", "derived", "sql",
        ("runs", "log_lines", "step_metrics", "step_phases", "run_files", "run_launches"),
        ("run_id", "last_step", "expected_steps", "reached_end", "progress_line_no", "began"),
        "Per run: how far it got, the driver-log line of its last progress, whether training began, verl's progress"
        " bar, and the runs an earlier launch left in the same log.",
        stand_in="run_id varchar, new_run_segment integer",
    ),
    Table(
        "run_training", "derived", "sql", ("step_health",),
        (),
        "Per run whose training collapsed or diverged and had not recovered by its last step: the outcome and its"
        " onset step, among the steps of the log's last launch.",
        stand_in="run_id varchar, training_outcome varchar, training_outcome_step bigint",
    ),
    Table(
        "run_step_time", "derived", "sql", ("log_lines", "step_phases", "run_training", "run_progress"),
        ("run_id", "median_step_s", "bottleneck_phase", "counted_s", "last_checkpoint_step", "running_s"),
        "Per run: where its time went (phase sums and shares, the bottleneck), the time in steps a checkpoint kept,"
        " the running time per resume segment, and the time before a training collapse.",
    ),
    Table(
        "run_cause", "derived", "sql",
        ("log_lines", "step_metrics", "step_health", "run_events", "run_files", "run_progress"),
        ("run_id", "cause_class", "cause_position", "root_cause_line_no", "stop_position", "stop_reason"),
        "Per run: the error that ended it and its root-cause line, a stop on purpose or by a scheduler, the phase"
        " the driver's traceback names, and a divergence's onset.",
    ),
    Table(
        "run_stall", "derived", "sql", ("log_lines", "run_files", "run_progress", "run_step_time", "run_cause"),
        ("run_id", "tail_phase", "held", "hung", "hang_duration_s", "hang_line_no"),
        "Per run: what its driver log did after its last progress: the phase of its last sign of work, a debugger"
        " a person attached, and a stall with its evidence, length and line.",
    ),
    Table(
        "run_summary", "derived", "sql",
        ("runs", "log_lines", "run_files", "run_progress", "run_step_time", "run_cause", "run_stall"),
        ("run_id", "failure_class", "last_step", "expected_steps", "root_cause_file", "root_cause_line_no",
         "root_cause_text", "bottleneck_phase", "failure_phase", "stop_reason", "hang_reason", "training_outcome",
         "training_outcome_step"),
        "One row per run: failure class, last step, root cause line, bottleneck, goodput.",
    ),
    Table(
        "run_facts", "derived", "sql", ("log_lines", "step_phases", "step_health", "run_summary"),
        ("run_id", "device", "accelerator", "engine", "has_critic", "has_ref"),
        "Per run: the device it ran on (and its name in the reports: GPU, TPU, NPU), its rollout engine and whether"
        " it had a critic and a reference policy, from its config, else its log and metrics.",
        stand_in="run_id varchar, device varchar, accelerator varchar, engine varchar, has_critic boolean,"
                 " has_ref boolean",
    ),
    Table(
        "config_checks", "derived", "sql", ("runs",),
        ("run_id", "finding", "severity", "setting", "message"),
        "Per setting check a run's config fails (batch sizes that do not divide, grad clip off, a wide clip ratio,"
        " no KL regularisation): the setting and the message; config_findings adds the evidence line.",
    ),
    Table(
        "config_findings", "derived", "sql",
        ("runs", "log_lines", "step_metrics", "run_launches", "step_health", "run_events", "run_summary",
         "config_checks"),
        (),
        "Configuration problems the logs show, each with its evidence line.",
    ),
    Table(
        "run_samples", "derived", "sql", ("runs", "log_lines"),
        (),
        "Sampled generations the log printed ([prompt]/[response]/[ground_truth]/[score]), a few per step range:"
        " the best and worst score and every one with a cue (repetition, cut at the length limit, empty answer,"
        " reward without the answer), with step, score and length.",
    ),
    Table(
        "fleet_daily", "fleet", "sql", ("run_summary",),
        (),
        "Runs per day with failure counts by class.",
    ),
    Table(
        "fleet_weekly", "fleet", "sql", ("run_summary",),
        (),
        "Runs per week with failure counts and week-over-week change.",
    ),
    Table(
        "run_baselines", "fleet", "sql", ("run_summary", "step_phases", "run_facts"),
        (),
        "Each run's config group, and the run against earlier runs of its experiment, config group and model setup.",
        stand_in=(
            "run_id varchar, group_prior_runs bigint, group_step_ratio double, exp_prior_runs bigint,"
            " exp_step_ratio double, setup_prior_runs bigint, setup_slowdown_ratio double"
        ),
    ),
    Table(
        "fleet_config_groups", "fleet", "sql", ("run_summary", "step_phases", "run_baselines"),
        (),
        "Phase shares and step times by config group (as run_baselines names it).",
    ),
    Table(
        "error_templates", "fleet", "sql", ("runs", "run_events", "run_launches", "run_summary"),
        ("template", "n_runs", "n_lines", "first_seen", "last_seen", "example", "known"),
        "Error and warning lines of every run mined into templates (Drain3), with runs, lines, first and last"
        " seen, an example, and whether a rule names them.",
    ),
    Table(
        "step_anomalies", "derived", "pipeline.detect.score_runs",
        ("runs", "step_metrics", "run_launches", "step_phases", "step_health", "run_baselines", MODEL),
        ("run_id", "step", "is_anomaly", "score", "anomaly_class", "explanation"),
        "Every step scored by the fleet's model and the rules, with class, explanation and episode.",
        stand_in=(
            "run_id varchar, step bigint, is_anomaly boolean, score double, anomaly_class varchar,"
            " explanation varchar, episode_id bigint"
        ),
    ),
    Table(
        "run_attention", "fleet", "sql", ("run_summary", "step_anomalies", "run_baselines"),
        ("run_id", "failure_class", "failed", "episodes", "regression", "attention", "needs_attention"),
        "Each run's verdict, decided once for the fleet page and the mails: failed (by the failure-class"
        " vocabulary), anomaly episodes, regression scope against earlier runs, and attention (0 failed, 1 hung,"
        " 2 anomalous or slower, 3 fine).",
    ),
    Table(
        "run_advice", "derived", "sql", ("run_summary", "run_facts", "config_findings", "step_anomalies"),
        ("run_id", "episode_id", "rank", "kind", "setting", "current_value", "suggested_value", "why", "source"),
        "Every piece of advice the reports show: per run that did not complete and per anomaly episode, each"
        " configuration or environment change to try from the run's own value, or a check where no change follows.",
    ),
)
# What the anomaly model is fitted on (run_baselines: each run's config group, for the fleet baseline)
MODEL_READS = ("runs", "step_phases", "step_health", "run_baselines")

BY_NAME = {t.name: t for t in TABLES}


def in_last_launch(alias: str) -> str:
    """The SQL test that a row of `alias` (a table with `segment` and `file`) belongs to its log's last launch,
    run_launches being joined as `la`: the driver file's segments from the launch on, every other file's (a side
    file counts its own segments), and the file logger's JSONL rows (segment -1). sql/step_phases.sql,
    step_health.sql and config_findings.sql write the same test."""
    return (f"({alias}.segment < 0 or {alias}.segment >= la.launch_segment "
            f"or {alias}.file is distinct from la.launch_file)")


def table(name: str) -> Table:
    """The declared table `name` (KeyError for an undeclared one)."""
    return BY_NAME[name]


def names(layer: str | None = None, writer: str | None = None, per_run: bool | None = None) -> tuple[str, ...]:
    """Names of the declared tables, in dependency order, optionally of one layer, writer or scope."""
    return tuple(
        t.name for t in TABLES
        if (layer is None or t.layer == layer) and (writer is None or t.writer == writer)
        and (per_run is None or t.per_run == per_run)
    )


def with_inputs(*wanted: str) -> tuple[str, ...]:
    """`wanted` and every table they read, directly or through others, in dependency order."""
    need: set[str] = set()
    todo = list(wanted)
    while todo:
        if (name := todo.pop()) not in need:
            need.add(name)
            todo.extend(table(name).reads)
    return tuple(t.name for t in TABLES if t.name in need)


def per_run_tables() -> tuple[str, ...]:
    """Tables partitioned by run_id."""
    return names(per_run=True)


def fleet_tables() -> tuple[str, ...]:
    """Tables rewritten whole for the fleet."""
    return names(per_run=False)


def sql_tables(per_run: bool | None = None) -> tuple[str, ...]:
    """Tables computed by `sql/<name>.sql`, in dependency order."""
    return names(writer="sql", per_run=per_run)


def needs_model(name: str) -> bool:
    """Whether the table reads the anomaly model, directly or through the tables it reads."""
    reads = table(name).reads
    return MODEL in reads or any(needs_model(r) for r in reads if r in BY_NAME)


def contract(name: str) -> frozenset[str]:
    """The contract columns of a table; none for a table that is not declared."""
    return frozenset(BY_NAME[name].contract) if name in BY_NAME else frozenset()


def markdown() -> str:
    """The table list of docs/architecture.md, generated from this registry."""
    rows = ["| table | layer | written by | reads | contract columns | holds |", "|---|---|---|---|---|---|"]
    for t in TABLES:
        writer = f"`sql/{t.name}.sql`" if t.writer == "sql" else f"`{t.writer}`"
        reads = ", ".join(t.reads) or "the archive"
        rows.append(f"| `{t.name}` | {t.layer} | {writer} | {reads} | {', '.join(t.contract) or '-'} | {t.description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
