-- One row per (run, training step): every verl timer as a column, the unaccounted rest of the step,
-- each phase's share of the step, the bottleneck phase, per-token times, tokens, throughput and wall time.
-- Bound parameters: $step_phases VARCHAR[], the timers inside a step, and $timers
-- VARCHAR[], every timer (pipeline/vocabulary.py).
with key_map(key, col, priority) as (
    -- verl metric key -> column; a lower priority wins when a step carries several spellings
    values
        ('timing_s/gen', 'gen', 1), ('timing/gen', 'gen', 2),
        ('timing_s/get_batch_rollout_with_filtering', 'gen', 3),
        ('timing_s/reward', 'reward', 1), ('timing/reward', 'reward', 2),
        ('timing_s/old_log_prob', 'old_log_prob', 1), ('timing/old_log_prob', 'old_log_prob', 2),
        ('timing_s/ref', 'ref', 1), ('timing/ref', 'ref', 2),
        ('timing_s/values', 'values', 1), ('timing/values', 'values', 2),
        ('timing_s/adv', 'adv', 1), ('timing/adv', 'adv', 2),
        ('timing_s/update_critic', 'update_critic', 1), ('timing/update_critic', 'update_critic', 2),
        ('timing_s/update_actor', 'update_actor', 1), ('timing/update_actor', 'update_actor', 2),
        ('timing_s/update_weights', 'update_weights', 1), ('timing/update_weights', 'update_weights', 2),
        ('timing_s/testing', 'testing', 1), ('timing/testing', 'testing', 2),
        ('timing_s/save_checkpoint', 'save_checkpoint', 1), ('timing/save_checkpoint', 'save_checkpoint', 2),
        ('timing_s/step', 'step_time', 1), ('timing/step', 'step_time', 2), ('perf/time_per_step', 'step_time', 3),
        ('timing_per_token_ms/gen', 'tpt_gen', 1), ('timing_per_token/gen', 'tpt_gen', 2),
        ('timing_per_token_ms/ref', 'tpt_ref', 1), ('timing_per_token/ref', 'tpt_ref', 2),
        ('timing_per_token_ms/values', 'tpt_values', 1), ('timing_per_token/values', 'tpt_values', 2),
        ('timing_per_token_ms/adv', 'tpt_adv', 1), ('timing_per_token/adv', 'tpt_adv', 2),
        ('timing_per_token_ms/update_critic', 'tpt_update_critic', 1),
        ('timing_per_token/update_critic', 'tpt_update_critic', 2),
        ('timing_per_token_ms/update_actor', 'tpt_update_actor', 1),
        ('timing_per_token/update_actor', 'tpt_update_actor', 2),
        ('perf/total_num_tokens', 'total_tokens', 1),
        ('response_length/mean', 'response_length_mean', 1),
        ('perf/throughput', 'throughput', 1),
        ('perf/mfu/actor', 'mfu_actor', 1), ('mfu/actor', 'mfu_actor', 2),
        ('perf/mfu/critic', 'mfu_critic', 1), ('mfu/critic', 'mfu_critic', 2)
),
metrics as (
    -- the log's last launch (run_launches); the file logger's JSONL rows carry segment -1
    select m.run_id, m.step, m.segment, m.file, m.line_no, k.col, k.priority, m.value
    from step_metrics as m
    join key_map as k on k.key = m.key
    left join run_launches as la using (run_id)
    where m.segment < 0 or m.segment >= la.launch_segment or m.file is distinct from la.launch_file
),
picked as (
    select run_id, step, col, arg_min(value, priority) as value, max(segment) as segment,
           arg_min(file, priority) as file, arg_min(line_no, priority) as line_no
    from metrics
    group by all
),
wide as (
    select
        run_id, step,
        max(segment) as segment,
        max(value) filter (where col = 'gen') as gen,
        max(value) filter (where col = 'reward') as reward,
        max(value) filter (where col = 'old_log_prob') as old_log_prob,
        max(value) filter (where col = 'ref') as ref,
        max(value) filter (where col = 'values') as "values",
        max(value) filter (where col = 'adv') as adv,
        max(value) filter (where col = 'update_critic') as update_critic,
        max(value) filter (where col = 'update_actor') as update_actor,
        max(value) filter (where col = 'update_weights') as update_weights,
        max(value) filter (where col = 'testing') as testing,
        max(value) filter (where col = 'save_checkpoint') as save_checkpoint,
        max(value) filter (where col = 'step_time') as step_time,
        max(value) filter (where col = 'tpt_gen') as logged_tpt_gen,
        max(value) filter (where col = 'tpt_ref') as logged_tpt_ref,
        max(value) filter (where col = 'tpt_values') as logged_tpt_values,
        max(value) filter (where col = 'tpt_adv') as logged_tpt_adv,
        max(value) filter (where col = 'tpt_update_critic') as logged_tpt_update_critic,
        max(value) filter (where col = 'tpt_update_actor') as logged_tpt_update_actor,
        max(value) filter (where col = 'total_tokens') as total_tokens,
        max(value) filter (where col = 'response_length_mean') as response_length_mean,
        max(value) filter (where col = 'throughput') as logged_throughput,
        max(value) filter (where col = 'mfu_actor') as mfu_actor,
        max(value) filter (where col = 'mfu_critic') as mfu_critic,
        max(file) filter (where col = 'step_time') as step_file,
        max(line_no) filter (where col = 'step_time') as step_line_no
    from picked
    group by all
    -- a row per step that ran a timer: the validation-only step:0 line has none
    having count(*) filter (where list_contains($timers, col) or col = 'step_time') > 0
),
gpus as (
    select
        run_id,
        nullif(coalesce(n_gpus_per_node, 1) * coalesce(nnodes, 1), 0) as n_gpus,
        train_batch_size * coalesce(rollout_n, 1) as n_responses
    from runs
),
inside as (
    select
        w.*,
        coalesce(list_sum(list_value(*columns(lambda c: list_contains($step_phases, c)))), 0) as phases_sum,
        g.n_gpus,
        w.response_length_mean * g.n_responses as response_tokens
    from wide as w
    left join gpus as g using (run_id)
),
shares as (
    select
        *,
        -- timers are nested sequentially inside `step`; when rounding makes the phases exceed it,
        -- the phases themselves are the denominator so the shares still sum to 1
        greatest(step_time - phases_sum, 0) as other_time,
        nullif(greatest(step_time, phases_sum), 0) as denom
    from inside
),
bottleneck as (
    select run_id, step, arg_max(phase, seconds) as bottleneck_phase
    from (
        unpivot (select run_id, step, columns(lambda c: list_contains($step_phases, c)) from wide)
        on columns(lambda c: list_contains($step_phases, c))
        into name phase value seconds
    )
    where isfinite(seconds)
    group by all
),
step_ts as (
    -- the newest timestamp written in the same file at or before each step line
    select s.run_id, s.step, s.step_line_no, s.step_file, l.ts, l.line_no as ts_line_no
    from shares as s
    asof left join (
        select run_id, file, line_no, ts
        from log_lines
        where ts is not null
    ) as l
        on l.run_id = s.run_id and l.file = s.step_file and l.line_no <= s.step_line_no
),
fresh as (
    select
        *,
        -- a timestamp written since the previous step line dates this step's end; an older one does not
        case when ts_line_no > coalesce(lag(step_line_no) over w, 0) then ts end as step_end_ts
    from step_ts
    window w as (partition by run_id, step_file order by step_line_no)
),
wall as (
    select
        run_id, step,
        epoch(step_end_ts - lag(step_end_ts) over w) as wall_time_s,
        step_end_ts as step_ts
    from fresh
    window w as (partition by run_id, step_file order by step_line_no)
)
select
    s.run_id, s.step, s.segment,
    s.gen, s.reward, s.old_log_prob, s.ref, s."values", s.adv, s.update_critic, s.update_actor,
    s.update_weights, s.testing, s.save_checkpoint, s.step_time,
    case when s.step_time is not null then s.other_time end as other_time,
    columns(lambda c: list_contains($step_phases, c)) / s.denom as "share_\0",
    case when s.step_time is not null then s.other_time / s.denom end as share_other,
    b.bottleneck_phase,
    -- as verl computes them: gen per response token, the other phases per prompt+response token
    coalesce(s.logged_tpt_gen, s.gen * 1000 / nullif(s.response_tokens, 0)) as tpt_gen,
    coalesce(s.logged_tpt_ref, s.ref * 1000 / nullif(s.total_tokens, 0)) as tpt_ref,
    coalesce(s.logged_tpt_values, s."values" * 1000 / nullif(s.total_tokens, 0)) as tpt_values,
    coalesce(s.logged_tpt_adv, s.adv * 1000 / nullif(s.total_tokens, 0)) as tpt_adv,
    coalesce(s.logged_tpt_update_critic, s.update_critic * 1000 / nullif(s.total_tokens, 0))
        as tpt_update_critic,
    coalesce(s.logged_tpt_update_actor, s.update_actor * 1000 / nullif(s.total_tokens, 0))
        as tpt_update_actor,
    s.total_tokens,
    coalesce(s.logged_throughput, s.total_tokens / nullif(s.step_time * s.n_gpus, 0)) as throughput,
    s.mfu_actor, s.mfu_critic,
    w.wall_time_s,
    w.step_ts,
    -- the same clock as seconds, for the report's wall-clock chart (its per-step arrays are numbers)
    epoch(w.step_ts) as step_end_s
from shares as s
left join bottleneck as b using (run_id, step)
left join wall as w using (run_id, step)
order by s.run_id, s.step
