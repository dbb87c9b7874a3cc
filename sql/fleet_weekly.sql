-- Runs by the week they ended in, with failure counts by class and the figures of the week before.
-- Weeks are the data's own: 7-day windows counted back from the day the newest run ended, so the last
-- week is whole and ends on that day however old the archive is. Every week from the first run's to the
-- newest is listed, an empty one with 0 runs, so "the week before" is always the 7 days before.
with run as (
    select
        s.run_id, s.failure_class, c.failed, s.median_step_s, s.goodput, s.last_step, s.hang_duration_s,
        coalesce(s.last_ts, s.mtime, s.ingested_at)::date as day
    from run_summary as s
    left join failure_classes as c using (failure_class)
),
span as (
    select max(day) as last_day, min(day) as first_day from run
),
weeks as (
    select s.last_day - (7 * k.range + 6)::integer as week_start, s.last_day - (7 * k.range)::integer as week_end
    from span as s, range(0, (s.last_day - s.first_day) // 7 + 1) as k
    where s.last_day is not null
),
by_week as (
    select w.week_start, w.week_end, r.*
    from weeks as w
    left join run as r on r.day between w.week_start and w.week_end
),
by_class as (
    pivot (select week_start, failure_class from by_week) on failure_class in (select failure_class from failure_classes
        order by position) using count(*) group by week_start
),
counts as (
    select
        week_start, week_end,
        count(run_id) as runs,
        count(*) filter (where failed) as failed,
        coalesce(sum(hang_duration_s) filter (where failure_class = 'hang') / 3600, 0) as hang_hours,
        -- a run whose log just stops has no outcome to count for or against the rate
        count(*) filter (where failed)::double
        / nullif(count(*) filter (where failure_class <> 'no_outcome'), 0) as failure_rate,
        median(median_step_s) as median_step_s,
        median(goodput) as median_goodput,
        avg(goodput) as mean_goodput,
        coalesce(sum(last_step), 0) as steps
    from by_week
    group by all
),
weekly as (
    select n.week_start, n.week_end, n.runs, n.failed, c.* exclude (week_start),
           n.* exclude (week_start, week_end, runs, failed)
    from counts as n
    join by_class as c using (week_start)
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
