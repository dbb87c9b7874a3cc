-- One row per run: how it ended (failure_class, root-cause line, phase), how far it got, where its
-- time went, and its config facts. Reads the lake and the derived step_phases and run_events.
-- Bound parameters: $run_ids VARCHAR[], $thresholds STRUCT (pipeline/knowledge/derive_thresholds.toml).
with failure_map(event_class, failure_class, tier, rank) as (
    -- which event classes can end a run, as what failure class. The lowest tier present wins; within
    -- a tier the earliest line wins (the first line of the causal chain). `rank` picks the root-cause
    -- line among lines of the winning class: the most specific one first.
    values
        ('cuda_oom', 'cuda_oom', 1, 1), ('device_oom', 'cuda_oom', 1, 1),
        ('host_oom_killed', 'host_oom_killed', 1, 1),
        ('nccl_timeout', 'nccl_timeout', 1, 1),
        ('vllm_engine_error', 'vllm_engine_error', 1, 1), ('engine_traceback', 'vllm_engine_error', 1, 2),
        ('nan', 'nan_divergence', 2, 1),
        ('keyboard_interrupt', 'unknown', 2, 1), ('terminated', 'unknown', 2, 1),
        ('import_error', 'python_exception', 3, 1),
        ('python_exception', 'python_exception', 3, 2), ('timeout', 'python_exception', 3, 2),
        ('disk_full', 'python_exception', 3, 2), ('nccl_error', 'python_exception', 3, 2),
        ('distributed_init_error', 'python_exception', 3, 2), ('illegal_memory_access', 'python_exception', 3, 2),
        ('actor_died', 'ray_actor_died', 3, 1), ('killed_by_signal', 'ray_actor_died', 3, 1),
        ('actor_unavailable', 'ray_actor_died', 3, 2),
        ('ray_task_error', 'python_exception', 5, 3), ('unhandled_ray_error', 'python_exception', 5, 3),
        ('hydra_wrapper', 'unknown', 6, 3)
),
params as (
    select unnest($thresholds)
),
run as (
    select * from runs where list_contains($run_ids, run_id)
),
lines as (
    select run_id, file, line_no, kind, segment, step, phase_hint, ts, text
    from log_lines
    where list_contains($run_ids, run_id)
),
main_file as (
    -- the driver log: ordering prefers it, so a worker file's copy of a line never outranks it
    select run_id, arg_max(file, n) as file
    from (select run_id, file, count(*) as n from lines group by all)
    group by all
),
final_segment as (
    select run_id, max(segment) as segment, count(*) as n_lines, min(ts) as first_ts, max(ts) as last_ts
    from lines
    group by all
),
phases as (
    select * from step_phases where list_contains($run_ids, run_id)
),
final_start as (
    -- the step the final segment started from: its first step line in the driver log is the
    -- validation line, which repeats the checkpoint's step
    select l.run_id, min(try_cast(regexp_extract(l.text, 'step:(\d+) - ', 1) as bigint)) as step
    from lines as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    where l.kind = 'step_metrics'
    group by all
),
steps as (
    select
        p.run_id,
        max(p.step) filter (where p.segment = f.segment) as last_step,
        count(*) as n_steps,
        median(p.step_time) as median_step_s,
        -- steps whose results survive: up to the checkpoint the final segment resumed from, then its own
        sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) filter (
            where p.segment = f.segment or p.step <= coalesce(fs.step, 0)) as counted_s,
        sum(p.gen) as gen, sum(p.reward) as reward, sum(p.old_log_prob) as old_log_prob, sum(p.ref) as ref,
        sum(p."values") as "values", sum(p.adv) as adv, sum(p.update_critic) as update_critic,
        sum(p.update_actor) as update_actor, sum(p.update_weights) as update_weights,
        sum(p.other_time) as other_time,
        sum(p.testing) as testing, sum(p.save_checkpoint) as save_checkpoint
    from phases as p
    join final_segment as f using (run_id)
    left join final_start as fs using (run_id)
    group by all
),
step_totals as (
    select
        *,
        nullif(coalesce(gen, 0) + coalesce(reward, 0) + coalesce(old_log_prob, 0) + coalesce(ref, 0)
            + coalesce("values", 0) + coalesce(adv, 0) + coalesce(update_critic, 0) + coalesce(update_actor, 0)
            + coalesce(update_weights, 0) + coalesce(other_time, 0), 0) as inside_s
    from steps
),
run_bottleneck as (
    select run_id, arg_max(phase, seconds) as bottleneck_phase
    from (
        unpivot (select run_id, gen, reward, old_log_prob, ref, "values", adv, update_critic, update_actor,
                        update_weights from steps)
        on gen, reward, old_log_prob, ref, "values", adv, update_critic, update_actor, update_weights
        into name phase value seconds
    )
    group by all
),
attempts as (
    -- resumed runs: time of every step attempt, including the ones a resume repeated
    select l.run_id, sum(try_cast(regexp_extract(l.text,
            'timing_s/step"?:\s*(?:np\.float\d+\()?([0-9.eE+-]+)', 1) as double)) as attempted_s
    from lines as l
    join run as r using (run_id)
    where r.n_segments > 1 and l.kind = 'step_metrics'
    group by all
),
started as (
    -- the driver log's final segment printed a step line (even validation's step:0): start-up was over
    select distinct l.run_id
    from lines as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    where l.kind = 'step_metrics'
),
final_validation as (
    select distinct l.run_id
    from lines as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    where l.text like '%Final validation metrics%'
),
run_state as (
    select
        r.run_id,
        coalesce(s.last_step, 0) as last_step,
        r.total_training_steps as expected_steps,
        f.segment as final_segment,
        (r.total_training_steps is not null and coalesce(s.last_step, 0) >= r.total_training_steps)
            or (r.total_training_steps is null and v.run_id is not null) as reached_end
    from run as r
    left join final_segment as f using (run_id)
    left join steps as s using (run_id)
    left join final_validation as v using (run_id)
),
events as (
    select
        e.*,
        split_part(e.event_class, ':', 1) as base_class,
        e.file = mf.file as in_main_file,
        row_number() over (
            partition by e.run_id order by e.file <> mf.file, e.order_ts nulls first, e.file, e.line_no
        ) as position
    from run_events as e
    join main_file as mf using (run_id)
    where list_contains($run_ids, e.run_id) and e.kind = 'error'
),
recurring as (
    -- error classes the final segment already survived in completed steps are noise, not its ending
    select distinct e.run_id, e.event_class
    from events as e
    join run_state as s using (run_id)
    cross join params as p
    -- only the driver log knows the step a line was written in
    where e.segment = s.final_segment and e.in_main_file and e.step <= s.last_step - p.flush_slack_steps
),
driver_failed as (
    -- the driver reported a failure (Ray wrapper, Hydra, a dead actor): exceptions in workers matter
    select distinct e.run_id
    from events as e
    join run_state as s using (run_id)
    where e.segment = s.final_segment
      and e.base_class in ('ray_task_error', 'hydra_wrapper', 'unhandled_ray_error', 'actor_died')
),
terminal as (
    select e.*, m.failure_class, m.tier, m.rank
    from events as e
    join run_state as s using (run_id)
    cross join params as p
    join failure_map as m on m.event_class = e.base_class
    left join recurring as rc on rc.run_id = e.run_id and rc.event_class = e.event_class
    left join driver_failed as d on d.run_id = e.run_id
    where e.segment = s.final_segment
      and e.in_main_file
      and e.step >= s.last_step + 1 - p.flush_slack_steps
      and rc.run_id is null
      -- a worker's Python exception the driver never heard of was caught: the run went on
      and (m.failure_class <> 'python_exception' or d.run_id is not null
           or coalesce(e.component, 'TaskRunner') in ('TaskRunner', 'main_task'))
),
cause as (
    select
        run_id,
        arg_min(failure_class, [tier, position]) as failure_class,
        min(tier) as tier
    from terminal
    group by all
),
root as (
    -- the first line of the causal chain: the earliest line of the winning class itself,
    -- not the wrappers (RayTaskError, Hydra) that repeat it further down
    select
        t.run_id,
        arg_min(t.file, [t.rank, t.position]) as root_cause_file,
        arg_min(t.line_no, [t.rank, t.position]) as root_cause_line_no,
        arg_min(t.message, [t.rank, t.position]) as root_cause_text,
        arg_min(t.event_class, [t.rank, t.position]) as root_cause_event,
        arg_min(t.phase, [t.rank, t.position]) as root_cause_phase
    from terminal as t
    join cause as c on c.run_id = t.run_id and c.tier = t.tier and c.failure_class = t.failure_class
    group by all
),
driver_phase as (
    -- the driver's last traceback names, outermost first, the trainer call whose timer never closed
    select run_id, arg_max(traceback_phase, position) as phase
    from terminal
    where traceback_phase is not null and coalesce(component, 'TaskRunner') in ('TaskRunner', 'main_task')
    group by all
),
last_nan as (
    -- the last logged step went NaN/inf in a loss or gradient: the run diverged
    select h.run_id, h.step
    from step_health as h
    join run_state as s on s.run_id = h.run_id and s.last_step = h.step
    where list_contains($run_ids, h.run_id)
      and list_has_any(h.nan_keys, ['actor/pg_loss', 'actor/grad_norm', 'actor/kl_loss', 'critic/vf_loss',
                                    'critic/grad_norm', 'actor/ppo_kl', 'actor/entropy'])
),
tail_activity as (
    -- the last sign of work after the last step line of the final segment: the phase a silent run
    -- hung in, and the line that shows it (vLLM preempting sequences means it was generating)
    select
        l.run_id,
        arg_max(coalesce(l.phase_hint, 'gen'), [l.step, l.line_no]) as phase,
        arg_max(l.file, [l.step, l.line_no]) as file,
        arg_max(l.line_no, [l.step, l.line_no]) as line_no,
        arg_max(regexp_replace(l.text, '^\s*\([^)]*\)\s*', ''), [l.step, l.line_no]) as text
    from lines as l
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    where l.step > s.last_step
      and (l.phase_hint is not null or l.text like '%is preempted by PreemptionMode%')
    group by all
),
hang_sign as (
    -- what a silent run printed about itself: a breakpoint it waits at, or Ray's disk filling up
    select run_id, min(priority) as priority, arg_min(reason, [priority, line_no]) as reason,
           arg_min(phase, [priority, line_no]) as phase, arg_min(file, [priority, line_no]) as file,
           arg_min(line_no, [priority, line_no]) as line_no, arg_min(text, [priority, line_no]) as text
    from (
        select
            l.run_id, l.file, l.line_no, regexp_replace(l.text, '^\s*\([^)]*\)\s*', '') as text,
            case when l.disk_full then 2 else 1 end as priority,
            case when l.disk_full
                 then 'Ray''s session disk is over 95% full, so object spilling and logging fail'
                 else 'paused at a Ray debugger breakpoint, waiting for a debugger (not a failure)' end as reason,
            case when not l.disk_full then 'debugger' end as phase
        from (select *, text like '%file_system_monitor%is over 95% full%' as disk_full from lines) as l
        join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
        -- either explains a stop only when the log shows it after the last step line
        where (l.step > s.last_step or s.last_step = 0)
          and (l.disk_full or l.text like '%Ray debugger is listening%'
               or l.text like '%Waiting for debugger to attach%')
    )
    group by all
),
hang_line as (
    -- the line a hung run is reported by: a debugger breakpoint, else the last sign of work, else
    -- Ray's full disk
    select run_id,
           unnest(case when hs.priority = 1 or ta.run_id is null
                       then {'file': hs.file, 'line_no': hs.line_no, 'text': hs.text}
                       else {'file': ta.file, 'line_no': ta.line_no, 'text': ta.text} end)
    from hang_sign as hs full join tail_activity as ta using (run_id)
),
last_line as (
    select run_id, arg_max(file, [coalesce(epoch(ts), 0), line_no]) as file,
           arg_max(line_no, [coalesce(epoch(ts), 0), line_no]) as line_no,
           arg_max(text, [coalesce(epoch(ts), 0), line_no]) as text
    from lines
    group by all
),
verdict as (
    select
        s.run_id,
        case
            when s.reached_end then 'completed'
            when c.failure_class is not null and c.tier <= 1 then c.failure_class
            -- NaN losses in the last step and then an error: the divergence ended it
            when n.run_id is not null and c.failure_class is not null then 'nan_divergence'
            when c.failure_class is not null then c.failure_class
            when f.n_lines is null then 'unknown'
            else 'hang'
        end as failure_class
    from run_state as s
    left join cause as c using (run_id)
    left join last_nan as n using (run_id)
    left join final_segment as f using (run_id)
)
select
    r.run_id,
    v.failure_class,
    s.last_step,
    s.expected_steps,
    s.last_step / nullif(s.expected_steps, 0) as completion,
    case when v.failure_class = 'hang' then hl.file
         when v.failure_class <> 'completed' then rt.root_cause_file end as root_cause_file,
    case when v.failure_class = 'hang' then hl.line_no
         when v.failure_class <> 'completed' then rt.root_cause_line_no end as root_cause_line_no,
    case when v.failure_class = 'hang' then hl.text
         when v.failure_class <> 'completed' then rt.root_cause_text end as root_cause_text,
    case when v.failure_class = 'hang' then hs.reason end as hang_reason,
    case when v.failure_class not in ('completed', 'hang') then rt.root_cause_event end as root_cause_event,
    case
        when v.failure_class = 'completed' then null
        -- no sign of work after the last step line: fit() starts the next step with generation
        when v.failure_class = 'hang' then coalesce(hs.phase, ta.phase, case when s.last_step > 0 then 'gen' end)
        when sd.run_id is null and coalesce(dp.phase, rt.root_cause_phase, '') <> 'testing' then 'startup'
        else coalesce(dp.phase, rt.root_cause_phase, ta.phase)
    end as failure_phase,
    ll.file as last_line_file,
    ll.line_no as last_line_no,
    ll.text as last_line_text,
    b.bottleneck_phase,
    st.median_step_s,
    st.n_steps as n_timed_steps,
    st.gen / st.inside_s as share_gen,
    st.reward / st.inside_s as share_reward,
    st.old_log_prob / st.inside_s as share_old_log_prob,
    st.ref / st.inside_s as share_ref,
    st."values" / st.inside_s as share_values,
    st.adv / st.inside_s as share_adv,
    st.update_critic / st.inside_s as share_update_critic,
    st.update_actor / st.inside_s as share_update_actor,
    st.update_weights / st.inside_s as share_update_weights,
    st.other_time / st.inside_s as share_other,
    -- a log may carry timestamps only around start-up, so the span is at least the time in steps
    greatest(coalesce(epoch(f.last_ts - f.first_ts), 0), coalesce(a.attempted_s, 0),
             coalesce(st.counted_s, 0)) as wall_time_s,
    -- time in steps whose results were kept, over all time spent (wall clock where the log has
    -- timestamps, else every step attempt including those a resume repeated)
    least(st.counted_s / nullif(greatest(coalesce(epoch(f.last_ts - f.first_ts), 0),
                                         coalesce(a.attempted_s, 0), st.counted_s), 0), 1) as goodput,
    greatest(coalesce(r.n_segments, 1) - 1, 0) as resume_count,
    r.n_metric_values::double / nullif(r.n_metric_values + r.n_parse_failures, 0) as parse_completeness,
    r.* exclude (run_id)
from run as r
left join run_state as s using (run_id)
left join verdict as v using (run_id)
left join root as rt using (run_id)
left join tail_activity as ta using (run_id)
left join hang_sign as hs using (run_id)
left join hang_line as hl using (run_id)
left join started as sd using (run_id)
left join driver_phase as dp using (run_id)
left join last_line as ll using (run_id)
left join run_bottleneck as b using (run_id)
left join step_totals as st using (run_id)
left join attempts as a using (run_id)
left join final_segment as f using (run_id)
order by r.run_id
