-- Each run's verdict for the fleet page, the alert mail and the fleet mail, decided here once: whether it
-- failed (failure_classes, the vocabulary's `failed` column), its anomaly episodes, whether it is a regression
-- against earlier runs (run_baselines' ratios), and how much attention it needs: 0 failed (its ending or its
-- training), 1 hung, 2 anomalous or slower, 3 fine.
-- Bound parameters: $thresholds STRUCT (derive_thresholds.toml [run_attention]).
with t as (
    select unnest($thresholds)
),
anomalies as (
    -- a column read through the row's JSON is null where the files of an older warehouse lack it: there,
    -- each anomalous step written before episodes were numbered counts as one
    select
        run_id,
        count(distinct coalesce(to_json(a) ->> 'episode_id', 'step ' || a.step)) as episodes,
        count(*) as anomalous_steps,
        mode(anomaly_class) as top_anomaly,
        list_sort(list(distinct anomaly_class)) as anomaly_classes
    from step_anomalies as a
    where is_anomaly
    group by all
),
regression as (
    -- the first scope that shows it: slower per step than earlier runs of the config group, then of the
    -- experiment, then fewer tokens per second per GPU than earlier runs of the model setup
    select
        run_id,
        case
            when group_prior_runs >= t.min_prior_runs and isfinite(group_step_ratio)
                and group_step_ratio > t.regression_ratio then 'group'
            when exp_prior_runs >= t.min_prior_runs and isfinite(exp_step_ratio)
                and exp_step_ratio > t.regression_ratio then 'exp'
            when setup_prior_runs >= t.min_prior_runs and isfinite(setup_slowdown_ratio)
                and setup_slowdown_ratio > t.regression_ratio then 'setup'
        end as regression
    from run_baselines, t
),
verdict as (
    select
        s.run_id,
        coalesce(s.failure_class, 'unknown') as failure_class,
        -- a class the vocabulary does not know counts as failed, as `unknown` does
        coalesce(c.failed, true) as failed,
        nullif(to_json(s) ->> 'training_outcome', '') as training_outcome,
        coalesce(a.episodes, 0) as episodes,
        coalesce(a.anomalous_steps, 0) as anomalous_steps,
        a.top_anomaly,
        coalesce(a.anomaly_classes, []) as anomaly_classes,
        r.regression
    from run_summary as s
    left join failure_classes as c on c.failure_class = coalesce(s.failure_class, 'unknown')
    left join anomalies as a using (run_id)
    left join regression as r using (run_id)
)
select
    *,
    case
        when training_outcome is not null then 0
        when failure_class = 'hang' then 1
        when failed then 0
        when episodes > 0 or regression is not null then 2
        else 3
    end as attention,
    attention < 3 as needs_attention
from verdict
order by run_id
