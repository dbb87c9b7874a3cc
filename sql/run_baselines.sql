-- Each run against the runs that started before it: of the same experiment, and of the same config
-- group (model, rollout engine, GPUs, rollout n). Ratios above 1 mean this run is slower / spends more.
-- Its outcome columns also give a run report the earlier runs of its experiment from one small file.
with run as (
    select
        run_id, experiment_name, failure_class, last_step, expected_steps, goodput, bottleneck_phase,
        median_step_s, share_gen, share_old_log_prob, share_update_actor, share_other,
        coalesce(first_ts, mtime, ingested_at) as started_at,
        coalesce(last_ts, mtime) as ended_at,
        concat_ws(' | ', coalesce(model_path, '?'), coalesce(rollout_engine, '?'),
                  (coalesce(n_gpus_per_node, 1) * coalesce(nnodes, 1))::varchar || ' GPUs',
                  'n=' || coalesce(rollout_n, 1)::varchar) as config_group
    from run_summary
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
        avg(share_other) over g as group_share_other
    from run
    window
        e as (partition by experiment_name order by started_at, run_id
              rows between unbounded preceding and 1 preceding),
        g as (partition by config_group order by started_at, run_id
              rows between unbounded preceding and 1 preceding)
)
select
    run_id, experiment_name, config_group, started_at, ended_at, failure_class, last_step, expected_steps,
    goodput, bottleneck_phase, median_step_s,
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
    share_other / nullif(group_share_other, 0) as group_other_share_ratio
from baselines
order by started_at, run_id
