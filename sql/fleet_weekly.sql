-- Runs per ISO week with failure counts by class and the change against the previous week.
with run as (
    select
        run_id, failure_class, median_step_s, goodput, last_step, hang_duration_s,
        date_trunc('week', coalesce(first_ts, mtime, ingested_at))::date as week
    from run_summary
),
weekly as (
    select
        week,
        count(*) as runs,
        count(*) filter (where failure_class = 'completed') as completed,
        count(*) filter (where failure_class not in ('completed', 'interrupted', 'no_outcome')) as failed,
        count(*) filter (where failure_class = 'cuda_oom') as cuda_oom,
        count(*) filter (where failure_class = 'nccl_timeout') as nccl_timeout,
        count(*) filter (where failure_class = 'ray_actor_died') as ray_actor_died,
        count(*) filter (where failure_class = 'host_oom_killed') as host_oom_killed,
        count(*) filter (where failure_class = 'hang') as hang,
        sum(hang_duration_s) filter (where failure_class = 'hang') / 3600 as hang_hours,
        count(*) filter (where failure_class = 'interrupted') as interrupted,
        count(*) filter (where failure_class = 'no_outcome') as no_outcome,
        count(*) filter (where failure_class = 'nan_divergence') as nan_divergence,
        count(*) filter (where failure_class = 'python_exception') as python_exception,
        count(*) filter (where failure_class = 'vllm_engine_error') as vllm_engine_error,
        count(*) filter (where failure_class = 'unknown') as unknown,
        count(*) filter (where failure_class not in ('completed', 'interrupted', 'no_outcome'))::double
        / nullif(count(*) filter (where failure_class <> 'no_outcome'), 0) as failure_rate,
        median(median_step_s) as median_step_s,
        avg(goodput) as mean_goodput,
        sum(last_step) as steps
    from run
    group by all
)
select
    *,
    -- the previous row is the previous week with runs; a gap of empty weeks compares with the last one
    lag(week) over w as prev_week,
    runs - lag(runs) over w as runs_change,
    failure_rate - lag(failure_rate) over w as failure_rate_change,
    median_step_s / nullif(lag(median_step_s) over w, 0) - 1 as median_step_s_change,
    mean_goodput - lag(mean_goodput) over w as goodput_change
from weekly
window w as (order by week)
order by week
