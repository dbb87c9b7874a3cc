-- Phase shares, step times and failure rates by config group, as run_baselines names each run's group.
with run as (
    select
        b.run_id, b.config_group, b.model, b.algorithm, b.rollout_n, b.train_batch_size, b.ppo_mini_batch_size,
        b.n_gpus, b.rollout_engine, s.failure_class, c.failed, s.goodput
    from run_baselines as b
    join run_summary as s using (run_id)
    left join failure_classes as c on c.failure_class = s.failure_class
),
runs_by_group as (
    select
        config_group, model, algorithm, rollout_n, train_batch_size, ppo_mini_batch_size, n_gpus, rollout_engine,
        count(*) as runs,
        count(*) filter (where failed) as failed,
        count(*) filter (where failed)::double / count(*) as failure_rate,
        avg(goodput) as mean_goodput,
        median(goodput) as median_goodput
    from run
    group by all
),
steps_by_group as (
    select
        r.config_group,
        count(*) as steps,
        median(p.step_time) as median_step_s,
        quantile_cont(p.step_time, 0.9) as p90_step_s,
        median(p.throughput) as median_throughput,
        sum(coalesce(p.gen, 0) + coalesce(p.reward, 0) + coalesce(p.old_log_prob, 0) + coalesce(p.ref, 0)
            + coalesce(p."values", 0) + coalesce(p.adv, 0) + coalesce(p.update_critic, 0)
            + coalesce(p.update_actor, 0) + coalesce(p.update_weights, 0) + coalesce(p.other_time, 0)) as inside_s,
        sum(p.gen) as gen, sum(p.reward) as reward, sum(p.old_log_prob) as old_log_prob, sum(p.ref) as ref,
        sum(p."values") as "values", sum(p.adv) as adv, sum(p.update_critic) as update_critic,
        sum(p.update_actor) as update_actor, sum(p.update_weights) as update_weights,
        sum(p.other_time) as other_time
    from step_phases as p
    join run as r using (run_id)
    group by all
),
shares as (
    select
        *,
        gen / nullif(inside_s, 0) as share_gen,
        reward / nullif(inside_s, 0) as share_reward,
        old_log_prob / nullif(inside_s, 0) as share_old_log_prob,
        ref / nullif(inside_s, 0) as share_ref,
        "values" / nullif(inside_s, 0) as share_values,
        adv / nullif(inside_s, 0) as share_adv,
        update_critic / nullif(inside_s, 0) as share_update_critic,
        update_actor / nullif(inside_s, 0) as share_update_actor,
        update_weights / nullif(inside_s, 0) as share_update_weights,
        other_time / nullif(inside_s, 0) as share_other
    from steps_by_group
)
select
    g.config_group, g.model, g.algorithm, g.rollout_n, g.train_batch_size, g.ppo_mini_batch_size, g.n_gpus,
    g.rollout_engine,
    g.runs, g.failed, g.failure_rate, g.mean_goodput, g.median_goodput,
    coalesce(s.steps, 0) as steps,
    s.median_step_s, s.p90_step_s, s.median_throughput,
    s.share_gen, s.share_reward, s.share_old_log_prob, s.share_ref, s.share_values, s.share_adv,
    s.share_update_critic, s.share_update_actor, s.share_update_weights, s.share_other,
    -- the phase with the largest share of the step timer (other time is not a phase)
    (select arg_max(v.phase, v.share) from (values
        ('gen', s.share_gen), ('reward', s.share_reward), ('old_log_prob', s.share_old_log_prob),
        ('ref', s.share_ref), ('values', s.share_values), ('adv', s.share_adv),
        ('update_critic', s.share_update_critic), ('update_actor', s.share_update_actor),
        ('update_weights', s.share_update_weights)
    ) as v(phase, share) where v.share > 0) as bottleneck_phase
from runs_by_group as g
left join shares as s using (config_group)
order by g.runs desc, g.config_group
