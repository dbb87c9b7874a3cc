-- One row per run: what ended it. The error that won (its failure class, tier and place in the causal order), its
-- root-cause line, a stop on purpose or by a scheduler, the phase the driver's traceback names, and a divergence's
-- onset where the last step went NaN. run_stall and run_summary read it.
-- Bound parameters: $thresholds STRUCT (pipeline/knowledge/derive_thresholds.toml).
with failure_map(event_class, failure_class, tier, rank) as (
    -- which event classes can end a run, as what failure class. The lowest tier present wins; within
    -- a tier the earliest line wins (the first line of the causal chain). `rank` picks the root-cause
    -- line among lines of the winning class: the most specific one first.
    values
        ('cuda_oom', 'cuda_oom', 1, 1), ('device_oom', 'cuda_oom', 1, 1),
        ('host_oom_killed', 'host_oom_killed', 1, 1),
        ('nccl_timeout', 'nccl_timeout', 1, 1), ('distributed_init_error', 'nccl_timeout', 1, 2),
        ('distributed_init_log', 'nccl_timeout', 1, 3),
        ('vllm_engine_error', 'vllm_engine_error', 1, 1), ('engine_traceback', 'vllm_engine_error', 1, 2),
        ('nan', 'nan_divergence', 2, 1),
        ('import_error', 'python_exception', 3, 1), ('config_error', 'python_exception', 3, 1),
        ('python_exception', 'python_exception', 3, 2), ('timeout', 'python_exception', 3, 2),
        ('disk_full', 'python_exception', 3, 2),
        -- NCCL failing outright (a system or network error) is distributed communication failing too; in the
        -- tier of other errors, since a rank's own exception makes its peers' collectives fail after it
        ('nccl_error', 'nccl_timeout', 3, 2),
        ('illegal_memory_access', 'python_exception', 3, 2),
        ('actor_died', 'ray_actor_died', 3, 1), ('killed_by_signal', 'ray_actor_died', 3, 1),
        ('worker_died', 'ray_actor_died', 3, 2),
        -- the driver itself died of a signal (a native crash): no worker died, nothing names why
        ('driver_signal', 'unknown', 3, 1),
        ('actor_unavailable', 'ray_actor_died', 3, 2),
        ('ray_task_error', 'python_exception', 5, 3), ('unhandled_ray_error', 'python_exception', 5, 3),
        ('exception_group', 'python_exception', 5, 3),
        ('hydra_wrapper', 'unknown', 6, 3)
),
params as (
    select unnest($thresholds)
),
progress_point as (select run_id, progress_line_no as line_no from run_progress),
main_file as (select run_id, file from run_files where is_main),
step_lines as (select run_id, file, line_no, segment, step, text from log_lines where kind = 'step_metrics'),
final_segment as (select run_id, final_segment as segment from run_progress where final_segment is not null),
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
    where e.kind = 'error'
),
recurring as (
    -- error classes the final segment already survived in completed steps are noise, not its ending
    select distinct e.run_id, e.event_class
    from events as e
    join run_progress as s using (run_id)
    join progress_point as pp using (run_id)
    cross join params as p
    -- only the driver log knows the step a line was written in
    where e.segment = s.final_segment and e.in_main_file and e.step <= s.last_step - p.flush_slack_steps
      and e.line_no < pp.line_no
),
driver_failed as (
    -- the driver reported a failure (Ray wrapper, Hydra, a dead actor): exceptions in workers matter
    select distinct e.run_id
    from events as e
    join run_progress as s using (run_id)
    where e.segment = s.final_segment
      and e.base_class in ('ray_task_error', 'hydra_wrapper', 'unhandled_ray_error', 'actor_died', 'worker_died')
),
final_attempt as (
    -- when the driver log's final segment began: another process's log that ended before was an earlier attempt's
    select l.run_id, min(l.ts) as started
    from log_lines as l
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    join run_progress as s on s.run_id = l.run_id and s.final_segment = l.segment
    -- the lines without a time left out before the joins, not after them
    where l.ts is not null
    group by all
),
after_progress as (
    -- the driver log's errors that may have ended the run: written in (or flushed just after) its last
    -- step, or after the line where it last made progress
    select e.*
    from events as e
    join run_progress as s using (run_id)
    join progress_point as pp using (run_id)
    cross join params as p
    left join driver_failed as d using (run_id)
    left join run_files as f using (run_id, file)
    left join final_attempt as fa using (run_id)
    where (e.segment = s.final_segment
           and e.in_main_file
           and (e.step >= s.last_step + 1 - p.flush_slack_steps or e.line_no > pp.line_no))
       -- another process's own log (a Ray worker's .err, raylet.out, an inference server's log): once the
       -- driver reported a failure, a cause that only that file names is the run's root cause
       or (not e.in_main_file and d.run_id is not null and not coalesce(f.side_file, false)
           and not coalesce(f.last_ts < fa.started, false))
),
terminal as (
    select e.*, m.failure_class, m.tier, m.rank
    from after_progress as e
    join failure_map as m on m.event_class = case
        when e.base_class = 'killed_by_signal' and coalesce(e.component, 'TaskRunner') in ('TaskRunner', 'main_task')
            then 'driver_signal'
        else e.base_class end
        and e.event_class <> 'ray_task_error:KeyboardInterrupt'
    left join recurring as rc on rc.run_id = e.run_id and rc.event_class = e.event_class
    left join driver_failed as d on d.run_id = e.run_id
    where rc.run_id is null
      -- a worker's Python exception the driver never heard of was caught: the run went on
      and (m.failure_class <> 'python_exception' or d.run_id is not null
           or coalesce(e.component, 'TaskRunner') in ('TaskRunner', 'main_task'))
),
weighed as (
    -- a collective that timed out after a rank's own Python error is that error's consequence (its peers waited
    -- for it): it then competes in time with the error instead of outranking it
    select * replace (case
        when failure_class = 'nccl_timeout' and position > min(position) filter (
                 where failure_class = 'python_exception' and tier = 3) over (partition by run_id)
            then 3 else tier end as tier)
    from terminal
),
cause as (
    select
        run_id,
        arg_min(failure_class, [tier, position]) as failure_class,
        min(tier) as tier,
        min(position) as first_position
    from weighed
    group by all
),
stop as (
    -- the first stop on purpose or by a scheduler: Ctrl-C, SIGTERM, a SLURM cancel or time limit
    select
        run_id,
        min(position) as position,
        arg_min(line_no, position) as line_no,
        arg_min(file, position) as file,
        arg_min(message, position) as message,
        arg_min(case
            when base_class = 'keyboard_interrupt' or regexp_matches(message, 'got signal: 2\b|SIGINT')
                then 'keyboard'
            when base_class = 'sigterm' then 'sigterm'
            else base_class end, position) as stop_reason
    from (
        select * replace (case when event_class = 'ray_task_error:KeyboardInterrupt' then 'keyboard_interrupt'
                               else base_class end as base_class)
        from after_progress
    )
    where base_class in ('keyboard_interrupt', 'time_limit', 'cancelled', 'sigterm')
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
    from weighed as t
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
nan_steps as (
    -- each step and whether a loss or gradient of it went NaN/inf
    select run_id, step, coalesce(list_has_any(nan_keys, ['actor/pg_loss', 'actor/grad_norm', 'actor/kl_loss',
                                                          'critic/vf_loss', 'critic/grad_norm', 'actor/ppo_kl',
                                                          'actor/entropy']), false) as diverged
    from step_health
),
last_nan as (
    -- the last logged step went NaN/inf in a loss or gradient: the run diverged
    select h.run_id, h.step
    from nan_steps as h
    join run_progress as s on s.run_id = h.run_id and s.last_step = h.step
    where h.diverged
),
divergence_onset as (
    -- where a divergence began: the first step of the stretch of non-finite steps that runs to the last one
    -- (the crash that ends such a run comes later), and that step's line with a non-finite loss or gradient
    select o.run_id, o.step, arg_min(m.file, m.line_no) as file, min(m.line_no) as line_no,
           list(distinct m.key order by m.key) as keys
    from (
        select h.run_id, min(h.step) as step
        from nan_steps as h
        join last_nan as n using (run_id)
        where h.diverged and h.step > coalesce((select max(c.step) from nan_steps as c
                                                where c.run_id = h.run_id and not c.diverged), -1)
        group by all
    ) as o
    join step_metrics as m on m.run_id = o.run_id and m.step = o.step and not isfinite(m.value)
    group by all
),
nan_line as (
    -- the driver log's step line of the step that went NaN: the cause when no error line names it
    select l.run_id, arg_min(l.file, l.line_no) as file, min(l.line_no) as line_no, arg_min(l.text, l.line_no) as text
    from step_lines as l
    join last_nan as n on n.run_id = l.run_id and n.step = l.step
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    group by all
)
select
    pr.run_id, c.failure_class as cause_class, c.tier as cause_tier, c.first_position as cause_position,
    rt.root_cause_file, rt.root_cause_line_no, rt.root_cause_text, rt.root_cause_event, rt.root_cause_phase,
    sp.position as stop_position, sp.file as stop_file, sp.line_no as stop_line_no, sp.message as stop_message,
    sp.stop_reason, dp.phase as driver_phase, n.run_id is not null as nan_at_end,
    nl.file as nan_line_file, nl.line_no as nan_line_no, nl.text as nan_line_text,
    od.step as onset_step, od.file as onset_file, od.line_no as onset_line_no, od.keys as onset_keys, ol.text as onset_text
from run_progress as pr
left join cause as c using (run_id)
left join root as rt using (run_id)
left join stop as sp using (run_id)
left join driver_phase as dp using (run_id)
left join last_nan as n using (run_id)
left join nan_line as nl using (run_id)
left join divergence_onset as od using (run_id)
left join log_lines as ol on ol.run_id = od.run_id and ol.file = od.file and ol.line_no = od.line_no
