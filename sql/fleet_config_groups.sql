-- Phase shares, step times and failure rates by config group, as run_baselines names each run's group.
-- Bound parameters: $step_phases VARCHAR[], the timers inside a step (pipeline/vocabulary.py).
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
        sum(coalesce(list_sum(list_value(*columns(lambda c: list_contains($step_phases, c)))), 0)
            + coalesce(p.other_time, 0)) as inside_s,
        sum(columns(lambda c: list_contains($step_phases, c))) as "\0",
        sum(p.other_time) as other_time
    from step_phases as p
    join run as r using (run_id)
    group by all
),
shares as (
    select
        *,
        columns(lambda c: list_contains($step_phases, c)) / nullif(inside_s, 0) as "share_\0",
        other_time / nullif(inside_s, 0) as share_other
    from steps_by_group
),
bottleneck as (
    -- the phase with the largest share of the step timer (other time is not a phase)
    select config_group, arg_max(phase, seconds) as bottleneck_phase
    from (
        unpivot (select config_group, columns(lambda c: list_contains($step_phases, c)) from steps_by_group)
        on columns(lambda c: list_contains($step_phases, c))
        into name phase value seconds
    )
    where seconds > 0
    group by all
)
select
    g.config_group, g.model, g.algorithm, g.rollout_n, g.train_batch_size, g.ppo_mini_batch_size, g.n_gpus,
    g.rollout_engine,
    g.runs, g.failed, g.failure_rate, g.mean_goodput, g.median_goodput,
    coalesce(s.steps, 0) as steps,
    s.median_step_s, s.p90_step_s, s.median_throughput,
    columns('^share_'),
    b.bottleneck_phase
from runs_by_group as g
left join shares as s using (config_group)
left join bottleneck as b using (config_group)
order by g.runs desc, g.config_group
