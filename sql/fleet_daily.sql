-- Runs per day (by the day a run started) with failure counts by class and the day's step-time picture.
-- A count column per class of the vocabulary (failure_classes), in its order.
with run as (
    select
        s.run_id, s.failure_class, c.failed, s.median_step_s, s.goodput, s.last_step, s.wall_time_s,
        s.hang_duration_s, coalesce(s.first_ts, s.mtime, s.ingested_at)::date as day
    from run_summary as s
    left join failure_classes as c using (failure_class)
),
by_class as (
    pivot (select day, failure_class from run) on failure_class in (select failure_class from failure_classes
        order by position) using count(*) group by day
),
daily as (
    select
        day,
        count(*) as runs,
        count(*) filter (where failed) as failed,
        sum(hang_duration_s) filter (where failure_class = 'hang') / 3600 as hang_hours,
        count(*) filter (where failed)::double
            / nullif(count(*) filter (where failure_class <> 'no_outcome'), 0) as failure_rate,
        median(median_step_s) as median_step_s,
        avg(goodput) as mean_goodput,
        sum(last_step) as steps,
        sum(wall_time_s) / 3600 as wall_hours
    from run
    group by all
)
select d.day, d.runs, d.failed, c.* exclude (day), d.* exclude (day, runs, failed)
from daily as d
-- a run with no time at all has no day: its row is kept
join by_class as c on c.day is not distinct from d.day
order by day
