-- Runs per day (by the day a run started) with failure counts by class and the day's step-time picture.
with run as (
    select
        run_id, failure_class, median_step_s, goodput, last_step, wall_time_s, hang_duration_s,
        coalesce(first_ts, mtime, ingested_at)::date as day
    from run_summary
)
select
    day,
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
    sum(last_step) as steps,
    sum(wall_time_s) / 3600 as wall_hours
from run
group by all
order by day
