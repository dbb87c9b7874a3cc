-- Every piece of advice the reports show: per run that did not complete (episode_id null: how it ended) and
-- per anomaly episode of step_anomalies, each configuration or environment change to try, from the run's own
-- value, or a check (what to look at) where no change follows. A rule applies only where the run has what it
-- names (run_facts): its roles (a critic, a reference policy), its rollout engine, its device.
-- Bound parameters: $rules STRUCT[] (pipeline/knowledge/run_advice.toml), $config_keys
-- VARCHAR[] (every config key it reads) and $config_paths VARCHAR[] (their JSON paths).
with rule as (
    select unnest($rules, recursive := true)
),
run as (
    -- each key it reads, from the config dump parsed once per run: a rule each parsing a 30 MB dump (or a
    -- 2 M-element list in it) ran the connection out of memory
    select run_id, failure_class, failure_phase, coalesce(root_cause_text, '') as cause,
           coalesce(hang_reason, '') as hang_reason,
           map($config_keys, coalesce(json_extract_string(config_json, $config_paths),
                                      list_transform($config_keys, lambda k: null::varchar))) as config
    from run_summary
),
facts as (
    select r.*, f.device, f.engine, f.has_critic, f.has_ref
    from run as r
    left join run_facts as f using (run_id)
),
findings as (
    select run_id, list(distinct finding) as findings
    from config_findings
    group by all
),
episode as (
    -- each anomaly episode with its class (the most frequent of its steps), steps and explanation
    select run_id, episode_id, mode(anomaly_class) as anomaly_class, min(step) as first_step, max(step) as last_step,
           arg_min(explanation, step) filter (where explanation is not null) as evidence
    from step_anomalies
    where is_anomaly and episode_id is not null
    group by all
),
subject as (
    -- what advice answers: how the run ended (a run that did not complete), and each anomaly episode
    select run_id, null::bigint as episode_id, failure_class, null as anomaly_class, null::bigint as first_step,
           null::bigint as last_step, null as evidence
    from run
    where failure_class <> 'completed'
    union all
    select run_id, episode_id, null, anomaly_class, first_step, last_step,
           coalesce(nullif(evidence, ''), 'flagged as ' || anomaly_class)
    from episode
),
matched as (
    select
        s.run_id, s.episode_id, s.first_step, s.last_step, s.evidence, f.cause, f.config, r.* replace (
            -- older verl versions name some knobs differently (a global micro batch, not per GPU)
            case when f.config[r.setting] is null and f.config[r.older] is not null
                 then r.older else r.setting end as setting),
        case when r.kind = 'config' then coalesce(f.config[r.setting], f.config[r.older]) end
            as current_value,
        case when r.fact is not null then coalesce(
            nullif(regexp_extract(f.cause, r.fact, 1), ''), nullif(regexp_extract(f.cause, r.fact, 2), '')) end
            as fact_value
    from subject as s
    join facts as f using (run_id)
    cross join rule as r
    left join findings as fi using (run_id)
    where (case when s.episode_id is null
                then list_contains(r.classes, s.failure_class)
                     and (r.phases is null or list_contains(r.phases, f.failure_phase))
                     and (r.text is null or regexp_matches(f.cause, r.text))
                     and (r.hang is null or regexp_matches(f.hang_reason, r.hang))
                else list_contains(r.anomalies, s.anomaly_class) end)
      and (r.finding is null or list_contains(coalesce(fi.findings, []), r.finding))
      and (r.no_finding is null or not list_contains(coalesce(fi.findings, []), r.no_finding))
      and (r.requires is null or lower(f.config[r.requires]) = 'true')
      and (r.unless is null or coalesce(lower(f.config[r.unless]), 'false') <> 'true')
      and (r.role is null or (r.role = 'critic' and f.has_critic) or (r.role = 'ref' and f.has_ref))
      and (r.engine is null or r.engine = f.engine)
      and (r.devices is null or list_contains(r.devices, f.device))
),
valued as (
    -- the value to try, moved from the run's own value (else verl's default); null where nothing moves
    select
        *,
        coalesce(current_value, "default") as base_value,
        try_cast(coalesce(current_value, "default") as double) as base
    from matched
    where (only_if is null or regexp_matches(coalesce(current_value, "default", ''), only_if))
      -- a key whose section the run's config dump shows without it is a key this verl version does not have
      and (kind <> 'config' or current_value is not null
           or config[regexp_replace(setting, '\.[^.]+$', '')] is null)
),
moved as (
    select
        *,
        case action
            when 'halve' then case when base > 1 then (floor(base / 2))::bigint::varchar end
            when 'double' then case when base * 2 <= coalesce(at_most, 1e9)
                                    then case when keep_fraction then (base * 2)::varchar
                                              else (base * 2)::bigint::varchar end end
            when 'scale' then case when base > 0 then format('{:g}', base * factor) end
            when 'step' then case
                when delta < 0 and base > at_least then round(greatest(at_least, base + delta), 4)::varchar
                when delta > 0 and base < at_most then round(least(at_most, base + delta), 4)::varchar end
            when 'enable' then case when coalesce(lower(base_value), 'false') <> 'true' then 'true' end
            when 'disable' then case when lower(base_value) = 'true' then 'false' end
            when 'set' then case when coalesce(base_value, '') <> value then value end
        end as moved
    from valued
),
advice as (
    select
        *,
        case when action <> 'check' then coalesce(moved, direction) end as suggested_value
    from moved
    -- a known value the rule cannot move further (already halved to 1, at its floor, already enabled, verl's
    -- default the run keeps) is no advice; an unknown one with no default still gets the direction to go
    where (action = 'check' or moved is not null or (base_value is null and action <> 'disable'))
      and (min_fact is null or try_cast(fact_value as double) >= min_fact)
),
kept as (
    -- never the run's own value, however it is written (1.0 and 1, True and true)
    select *
    from advice
    where suggested_value is null or current_value is null
       or (lower(suggested_value) <> lower(current_value)
           and try_cast(suggested_value as double) is distinct from try_cast(current_value as double)
           or try_cast(suggested_value as double) is null)
)
select
    run_id,
    episode_id,
    row_number() over (partition by run_id, episode_id order by rank, name) as rank,
    kind,
    setting,
    current_value,
    suggested_value,
    replace(replace(replace(replace(replace(replace(replace(replace(replace(why,
        '{current}', coalesce(current_value, case when "default" is not null then 'verl''s default ' || "default" end,
                              'not shown')),
        '{suggested}', coalesce(suggested_value, '')),
        '{fact}', coalesce(fact_value, '')),
        '{rank}', coalesce(nullif(regexp_extract(cause, '[Rr]ank (\d+)', 1), ''), '?')),
        '{op}', coalesce(nullif(regexp_extract(cause, 'OpType=(\w+)', 1), ''), 'a collective')),
        '{timeout_s}', coalesce((try_cast(nullif(regexp_extract(cause, 'Timeout\(ms\)=(\d+)', 1), '') as bigint)
                                 // 1000)::varchar, '?')),
        '{first_step}', coalesce(first_step::varchar, '')),
        '{last_step}', coalesce(last_step::varchar, '')),
        '{evidence}', coalesce(evidence, '')) as why,
    source,
    name as rule
from kept
order by run_id, episode_id nulls first, rank
