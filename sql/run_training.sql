-- One row per run whose training failed and had not recovered by its last step: `training_outcome`
-- (`collapsed`: response length, entropy or reward fell far below the run's first steps; `diverged`:
-- losses or gradients non-finite, or the gradient norm many times its first steps') and its onset step.
-- A run whose curves look sound, or that logged too few steps to judge, has no row. In a log of several launches
-- only the last launch's steps count (step_health holds no other).
-- Bound parameters: $thresholds STRUCT (pipeline/knowledge/derive_thresholds.toml).
with params as (
    select unnest($thresholds)
),
health as (
    select
        run_id, step, response_length_mean, entropy, coalesce(reward_mean, score_mean) as reward, grad_norm,
        -- the training signals only: a validation metric may be NaN on an empty split
        len(list_filter(coalesce(nan_keys, []), lambda k: regexp_matches(k, '^(actor|critic)/')
                                                   and regexp_matches(k, 'loss|grad_norm|kl|entropy|score|reward')))
            > 0 as nonfinite,
        coalesce(grad_norm, pg_loss, entropy, kl_loss, vf_loss, score_mean, reward_mean) is not null as trained
    from step_health
),
signal as (
    -- one row per (run, signal, step) where the step logged it
    select run_id, step, u.signal, u.value
    from health
    cross join lateral (
        select * from (values ('response_length', response_length_mean), ('entropy', entropy),
                              ('reward', reward), ('grad_norm', grad_norm)) as v(signal, value)
    ) as u
    where u.value is not null and isfinite(u.value)
),
ranked as (
    select *, row_number() over (partition by run_id, signal order by step) as n,
           count(*) over (partition by run_id, signal) as n_steps
    from signal
),
baseline as (
    -- the run's own first steps, before anything could have collapsed
    select run_id, signal, median(value) as base, max(n_steps) as n_steps
    from ranked, params as p
    where n <= p.baseline_steps
    group by all
),
judged as (
    select
        r.run_id, r.signal, r.step,
        case r.signal
            when 'response_length' then r.value < p.length_collapse_ratio * b.base
            when 'entropy' then r.value < p.entropy_collapse_ratio * b.base
            when 'reward' then r.value < b.base - greatest(p.reward_collapse_drop * abs(b.base), p.reward_collapse_min)
            when 'grad_norm' then r.value > p.grad_explosion_ratio * b.base
        end as bad,
        case when r.signal = 'grad_norm' then 'diverged' else 'collapsed' end as outcome,
        case when r.signal = 'reward' then p.reward_min_steps else p.min_bad_steps end as min_bad
    from ranked as r
    join baseline as b using (run_id, signal)
    cross join params as p
    where (b.base > 0 or r.signal = 'reward')
      and b.n_steps >= p.baseline_steps + p.min_bad_steps
    union all
    select run_id, 'nonfinite', step, nonfinite, 'diverged', 1
    from health
    -- steps that logged a training signal (a step of timers or validation alone says nothing of it)
    where trained
),
tail as (
    -- per step, from the end: how many steps follow it (itself included) and how many of those were good
    select
        *,
        count(*) over w as n_after,
        count(*) filter (where not bad) over w as good_after,
        last_value(bad) over (partition by run_id, signal order by step
                              rows between unbounded preceding and unbounded following) as ends_bad
    from judged
    window w as (partition by run_id, signal order by step desc rows between unbounded preceding and current row)
),
onset as (
    -- the first bad step after which the signal stayed bad (a rare good step aside) to the run's last step
    select run_id, signal, outcome, min(step) as onset_step
    from tail, params as p
    where bad and ends_bad and n_after - good_after >= min_bad and good_after <= p.recovered_share * n_after
    group by all
)
select
    run_id,
    -- non-finite values first (nothing after them is meaningful), then a collapse, then exploding gradients;
    -- among signals of one rank (length and entropy collapsing) the earliest onset, whichever signal the scan met first
    arg_min(outcome, [case signal when 'nonfinite' then 0 when 'grad_norm' then 2 else 1 end, onset_step])
        as training_outcome,
    arg_min(onset_step, [case signal when 'nonfinite' then 0 when 'grad_norm' then 2 else 1 end, onset_step])
        as training_outcome_step,
    list(signal order by onset_step) as training_signals
from onset
group by all
order by run_id
