-- Phase shares, step times and failure rates by config group (model, rollout engine, GPUs, rollout n).
with run as (
    select
        run_id, failure_class, goodput,
        coalesce(model_path, '?') as model_path,
        coalesce(rollout_engine, '?') as rollout_engine,
        coalesce(n_gpus_per_node, 1) * coalesce(nnodes, 1) as n_gpus,
        coalesce(rollout_n, 1) as rollout_n
    from run_summary
),
runs_by_group as (
    select
        model_path, rollout_engine, n_gpus, rollout_n,
        count(*) as runs,
        count(*) filter (where failure_class <> 'completed')::double / count(*) as failure_rate,
        avg(goodput) as mean_goodput
    from run
    group by all
),
steps_by_group as (
    select
        r.model_path, r.rollout_engine, r.n_gpus, r.rollout_n,
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
)
select
    g.model_path, g.rollout_engine, g.n_gpus, g.rollout_n,
    g.runs, g.failure_rate, g.mean_goodput,
    coalesce(s.steps, 0) as steps,
    s.median_step_s, s.p90_step_s, s.median_throughput,
    s.gen / nullif(s.inside_s, 0) as share_gen,
    s.reward / nullif(s.inside_s, 0) as share_reward,
    s.old_log_prob / nullif(s.inside_s, 0) as share_old_log_prob,
    s.ref / nullif(s.inside_s, 0) as share_ref,
    s."values" / nullif(s.inside_s, 0) as share_values,
    s.adv / nullif(s.inside_s, 0) as share_adv,
    s.update_critic / nullif(s.inside_s, 0) as share_update_critic,
    s.update_actor / nullif(s.inside_s, 0) as share_update_actor,
    s.update_weights / nullif(s.inside_s, 0) as share_update_weights,
    s.other_time / nullif(s.inside_s, 0) as share_other
from runs_by_group as g
left join steps_by_group as s using (model_path, rollout_engine, n_gpus, rollout_n)
order by g.runs desc, g.model_path, g.rollout_engine, g.n_gpus, g.rollout_n
