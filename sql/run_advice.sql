-- One row per configuration change suggested for a run that did not complete: which setting, the run's
-- own value, the value to try, why, and the knowledge-base rule it comes from. Reads run_summary (with
-- the config dump as JSON) and config_findings.
-- Bound parameters: $run_ids VARCHAR[], $rules STRUCT[] (pipeline/knowledge/run_advice.toml), $config_keys
-- VARCHAR[] (every config key a rule reads) and $config_paths VARCHAR[] (their JSON paths).
with rule as (
    select unnest($rules, recursive := true)
),
run as (
    -- each key the rules read, from the config dump parsed once per run: a rule each parsing a 30 MB dump
    -- (or a 2 M-element list in it) ran the connection out of memory
    select s.run_id, s.failure_class, s.failure_phase, coalesce(s.root_cause_text, '') as cause,
           coalesce(s.hang_reason, '') as hang_reason,
           map($config_keys, coalesce(json_extract_string(s.config_json, $config_paths),
                                      list_transform($config_keys, lambda k: null::varchar))) as config
    from run_summary as s
    where s.run_id in (select unnest($run_ids)) and s.failure_class <> 'completed'
),
findings as (
    select run_id, list(distinct finding) as findings
    from config_findings
    where run_id in (select unnest($run_ids))
    group by all
),
matched as (
    select
        s.run_id, s.cause, r.* replace (
            -- older verl versions name some knobs differently (a global micro batch, not per GPU)
            case when s.config[r.setting] is null
                      and s.config[r.older] is not null
                 then r.older else r.setting end as setting),
        case when r.kind = 'config' then coalesce(s.config[r.setting],
                                                 s.config[r.older]) end
            as current_value,
        case when r.fact is not null then coalesce(
            nullif(regexp_extract(s.cause, r.fact, 1), ''), nullif(regexp_extract(s.cause, r.fact, 2), '')) end
            as fact_value
    from run as s
    cross join rule as r
    left join findings as f using (run_id)
    where list_contains(r.classes, s.failure_class)
      and (r.phases is null or list_contains(r.phases, s.failure_phase))
      and (r.text is null or regexp_matches(s.cause, r.text))
      and (r.hang is null or regexp_matches(s.hang_reason, r.hang))
      and (r.finding is null or list_contains(coalesce(f.findings, []), r.finding))
      and (r.requires is null or s.config[r.requires] = 'true')
      and (r.unless is null or coalesce(s.config[r.unless], 'false') <> 'true')
),
valued as (
    -- the value to try, moved from the run's own value; null where the rule has nothing to move
    select
        *,
        try_cast(current_value as double) as current_number,
        case action
            when 'halve' then case when try_cast(current_value as double) > 1
                                   then (floor(try_cast(current_value as double) / 2))::bigint::varchar end
            when 'double' then case when try_cast(current_value as double) * 2 <= coalesce(at_most, 1e9)
                                    then (try_cast(current_value as double) * 2)::bigint::varchar end
            when 'step' then case
                when delta < 0 and try_cast(current_value as double) > at_least
                    then round(greatest(at_least, try_cast(current_value as double) + delta), 2)::varchar
                when delta > 0 and try_cast(current_value as double) < at_most
                    then round(least(at_most, try_cast(current_value as double) + delta), 2)::varchar end
            when 'enable' then case when coalesce(current_value, 'false') <> 'true' then 'true' end
            when 'disable' then case when current_value = 'true' then 'false' end
            when 'set' then case when coalesce(current_value, '') <> value then value end
        end as moved
    from matched
),
advice as (
    select
        *,
        coalesce(moved, direction) as suggested_value
    from valued
    -- a known value the rule cannot move further (already halved to 1, at its floor, already enabled)
    -- is no advice; an unknown one still gets the direction to go
    where (moved is not null or (current_value is null and action <> 'disable'))
      and (min_fact is null or try_cast(fact_value as double) >= min_fact)
)
select
    run_id,
    row_number() over (partition by run_id order by rank, name) as rank,
    setting,
    current_value,
    suggested_value,
    replace(replace(replace(replace(replace(replace(why,
        '{current}', coalesce(current_value, 'not shown')),
        '{suggested}', suggested_value),
        '{fact}', coalesce(fact_value, '')),
        '{rank}', coalesce(nullif(regexp_extract(cause, '[Rr]ank (\d+)', 1), ''), '?')),
        '{op}', coalesce(nullif(regexp_extract(cause, 'OpType=(\w+)', 1), ''), 'a collective')),
        '{timeout_s}', coalesce((try_cast(nullif(regexp_extract(cause, 'Timeout\(ms\)=(\d+)', 1), '') as bigint)
                                 // 1000)::varchar, '?')) as why,
    source,
    name as rule,
    kind
from advice
order by run_id, rank
