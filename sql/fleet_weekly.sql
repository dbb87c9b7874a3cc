-- Runs by the week they ended in, with failure counts by class and the figures of the week before.
-- Weeks are the data's own: 7-day windows counted back from the day the newest run ended, so the last
-- week is whole and ends on that day however old the archive is. Every week from the first run's to the
-- newest is listed, an empty one with 0 runs, so "the week before" is always the 7 days before.
with run as (
    select
        run_id, failure_class, median_step_s, goodput, last_step, hang_duration_s,
        coalesce(last_ts, mtime, ingested_at)::date as day
    from run_summary
),
span as (
    select max(day) as last_day, min(day) as first_day from run
),
weeks as (
    select s.last_day - (7 * k.range + 6)::integer as week_start, s.last_day - (7 * k.range)::integer as week_end
    from span as s, range(0, (s.last_day - s.first_day) // 7 + 1) as k
    where s.last_day is not null
),
weekly as (
    select
        w.week_start, w.week_end,
        count(r.run_id) as runs,
        count(*) filter (where r.failure_class = 'completed') as completed,
        count(*) filter (where r.failure_class not in ('completed', 'interrupted', 'no_outcome')) as failed,
        count(*) filter (where r.failure_class = 'cuda_oom') as cuda_oom,
        count(*) filter (where r.failure_class = 'nccl_timeout') as nccl_timeout,
        count(*) filter (where r.failure_class = 'ray_actor_died') as ray_actor_died,
        count(*) filter (where r.failure_class = 'host_oom_killed') as host_oom_killed,
        count(*) filter (where r.failure_class = 'hang') as hang,
        coalesce(sum(r.hang_duration_s) filter (where r.failure_class = 'hang') / 3600, 0) as hang_hours,
        count(*) filter (where r.failure_class = 'interrupted') as interrupted,
        count(*) filter (where r.failure_class = 'no_outcome') as no_outcome,
        count(*) filter (where r.failure_class = 'nan_divergence') as nan_divergence,
        count(*) filter (where r.failure_class = 'python_exception') as python_exception,
        count(*) filter (where r.failure_class = 'vllm_engine_error') as vllm_engine_error,
        count(*) filter (where r.failure_class = 'unknown') as unknown,
        -- a run whose log just stops has no outcome to count for or against the rate
        count(*) filter (where r.failure_class not in ('completed', 'interrupted', 'no_outcome'))::double
        / nullif(count(*) filter (where r.failure_class <> 'no_outcome'), 0) as failure_rate,
        median(r.median_step_s) as median_step_s,
        median(r.goodput) as median_goodput,
        avg(r.goodput) as mean_goodput,
        coalesce(sum(r.last_step), 0) as steps
    from weeks as w
    left join run as r on r.day between w.week_start and w.week_end
    group by all
)
select
    *,
    -- the 7 days before, whether or not a run ended in them
    lag(runs) over w as prev_runs,
    lag(failed) over w as prev_failed,
    lag(failure_rate) over w as prev_failure_rate,
    lag(median_step_s) over w as prev_median_step_s,
    lag(median_goodput) over w as prev_median_goodput,
    runs - lag(runs) over w as runs_change,
    failure_rate - lag(failure_rate) over w as failure_rate_change,
    median_step_s / nullif(lag(median_step_s) over w, 0) - 1 as median_step_s_change,
    median_goodput - lag(median_goodput) over w as goodput_change
from weekly
window w as (order by week_start)
order by week_start
