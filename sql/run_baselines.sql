-- Each run against the runs that ended before it: of the same experiment; of the same config group, the
-- settings that fix a step's work (model, algorithm, rollout n, batch and mini-batch size, GPUs or TPUs or NPUs,
-- rollout engine); and of the same model setup (model, algorithm, engine), whose tokens per second per GPU compare
-- across batch sizes and GPU counts. Ratios above 1 mean this run is slower / spends more of its step.
-- This is the one place a run's config group is named: fleet_config_groups and the reports read it here.
with throughput as (
    select run_id, median(throughput) as throughput, median(mfu_actor) as mfu_actor,
           -- a clock came before its first step: the log's first clock is its start-up's, not a later line's
           min(step) filter (where step_ts is not null) = min(step) as clocked_from_start
    from step_phases
    group by all
),
run as (
    select
        run_id,
        -- verl's default names (trainer.project_name verl_examples, trainer.experiment_name gsm8k) say nothing
        -- about a run: runs that kept them are no experiment together
        case when not (coalesce(project_name, 'verl_examples') = 'verl_examples' and experiment_name = 'gsm8k')
             then experiment_name end as experiment_name,
        failure_class, last_step, expected_steps, goodput, bottleneck_phase,
        median_step_s, share_gen, share_old_log_prob, share_update_actor, share_other,
        throughput, mfu_actor,
        coalesce(first_ts, mtime, ingested_at) as started_at,
        -- the log printed no time, or a last time over a day past its file's last change (a host clock set
        -- ahead, not a time zone): the end is the archive file's modification (or ingest) time. A log whose
        -- clocks stop well before its steps do (only start-up's lines carry one): its first clock plus the time
        -- verl's step timers measured, where a clock came before its first step
        case when last_ts > mtime + interval 1 day then mtime
             when timers_end > last_ts + interval 10 minute then timers_end
             else coalesce(last_ts, mtime, ingested_at) end as ended_at,
        last_ts is null or last_ts > mtime + interval 1 day as ended_by_file_time,
        coalesce(not last_ts > mtime + interval 1 day and timers_end > last_ts + interval 10 minute, false)
            as ended_by_timers,
        -- the time it ran (a stall's included) reaches well past its clocks, and nothing dates its end: its
        -- last clock is only when it was last seen
        coalesce(not last_ts > mtime + interval 1 day and timers_end is null
                 and wall_time_s > epoch(last_ts - first_ts) + 600, false) as outran_clocks,
        last_ts,
        -- the model by its name, wherever its files were: /mnt/hf/Qwen2.5-7B and Qwen/Qwen2.5-7B are one model
        nullif(regexp_extract(rtrim(model_path, '/'), '[^/]+$'), '') as model,
        adv_estimator as algorithm,
        rollout_n,
        train_batch_size,
        ppo_mini_batch_size,
        n_gpus_per_node * coalesce(nnodes, 1) as n_gpus,
        -- a TPU run's step is not a GPU run's: its devices are named in its group
        coalesce(accelerator, 'GPU') as accelerator,
        rollout_engine
    from (
        select s.*, t.throughput, t.mfu_actor, f.accelerator,
               case when t.clocked_from_start then s.first_ts + to_microseconds((s.wall_time_s * 1e6)::bigint) end
                   as timers_end
        from run_summary as s
        left join throughput as t using (run_id)
        left join (select run_id, accelerator from run_facts) as f using (run_id)
    )
),
grouped as (
    -- a run whose log does not name its model is compared with nothing: unknown settings are not the same
    select
        *,
        case when model is not null then concat_ws(' · ', model, coalesce(algorithm, '?'),
            'n=' || coalesce(rollout_n::varchar, '?'),
            'batch ' || coalesce(train_batch_size::varchar, '?') || '/' || coalesce(ppo_mini_batch_size::varchar, '?'),
            coalesce(n_gpus::varchar, '?') || ' ' || accelerator || case when n_gpus = 1 then '' else 's' end,
            coalesce(rollout_engine, '?')) end as config_group,
        case when model is not null then concat_ws(' · ', model, coalesce(algorithm, '?'), coalesce(rollout_engine, '?'))
        end as model_setup
    from run
),
scoped as (
    -- the windows' partitions: a null key would gather every run that lacks one into one "group"
    select *, coalesce(experiment_name, run_id) as exp_key, coalesce(config_group, run_id) as group_key,
           coalesce(model_setup, run_id) as setup_key
    from grouped
),
baselines as (
    select
        *,
        count(median_step_s) over e as exp_prior_runs,
        median(median_step_s) over e as exp_median_step_s,
        avg(share_gen) over e as exp_share_gen,
        avg(share_old_log_prob) over e as exp_share_old_log_prob,
        avg(share_update_actor) over e as exp_share_update_actor,
        avg(share_other) over e as exp_share_other,
        count(median_step_s) over g as group_prior_runs,
        median(median_step_s) over g as group_median_step_s,
        avg(share_gen) over g as group_share_gen,
        avg(share_old_log_prob) over g as group_share_old_log_prob,
        avg(share_update_actor) over g as group_share_update_actor,
        avg(share_other) over g as group_share_other,
        count(throughput) over m as setup_prior_runs,
        median(throughput) over m as setup_throughput,
        median(mfu_actor) over m as setup_mfu_actor
    from scoped
    window
        e as (partition by exp_key order by ended_at, run_id
              rows between unbounded preceding and 1 preceding),
        g as (partition by group_key order by ended_at, run_id
              rows between unbounded preceding and 1 preceding),
        m as (partition by setup_key order by ended_at, run_id
              rows between unbounded preceding and 1 preceding)
)
select
    run_id, experiment_name, config_group, model_setup, model, algorithm, rollout_n, train_batch_size,
    ppo_mini_batch_size, n_gpus, accelerator, rollout_engine, started_at, ended_at, ended_by_file_time,
    ended_by_timers, outran_clocks, last_ts, failure_class, last_step,
    expected_steps, goodput, bottleneck_phase, median_step_s, throughput, mfu_actor,
    exp_prior_runs,
    exp_median_step_s,
    median_step_s / nullif(exp_median_step_s, 0) as exp_step_ratio,
    share_gen / nullif(exp_share_gen, 0) as exp_gen_share_ratio,
    share_old_log_prob / nullif(exp_share_old_log_prob, 0) as exp_old_log_prob_share_ratio,
    share_update_actor / nullif(exp_share_update_actor, 0) as exp_update_actor_share_ratio,
    share_other / nullif(exp_share_other, 0) as exp_other_share_ratio,
    group_prior_runs,
    group_median_step_s,
    median_step_s / nullif(group_median_step_s, 0) as group_step_ratio,
    share_gen / nullif(group_share_gen, 0) as group_gen_share_ratio,
    share_old_log_prob / nullif(group_share_old_log_prob, 0) as group_old_log_prob_share_ratio,
    share_update_actor / nullif(group_share_update_actor, 0) as group_update_actor_share_ratio,
    share_other / nullif(group_share_other, 0) as group_other_share_ratio,
    setup_prior_runs,
    setup_throughput,
    setup_mfu_actor,
    -- above 1: this run moves fewer tokens per second per GPU than earlier runs of its model setup
    setup_throughput / nullif(throughput, 0) as setup_slowdown_ratio
from baselines
order by ended_at, run_id
