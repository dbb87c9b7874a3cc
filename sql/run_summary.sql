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
run as (
    select * from runs where run_id in (select unnest($run_ids))
),
-- not materialized: each use reads only the columns and rows it needs from Parquet, instead of one
-- in-memory copy of every line's text
lines as not materialized (
    select run_id, file, line_no, kind, component, segment, step, phase_hint, ts, text
    from log_lines
    where run_id in (select unnest($run_ids))
),
-- every line whose text the checks below read, but the tail's: the step lines, the progress bar's prints and
-- the few lines the end-of-run checks look for (`marked`), in one scan of the text (each scan of a 300 MB log's
-- text cost ~0.3 s, each check reading every line's text again ~0.4 s)
texts as materialized (
    select run_id, file, line_no, kind, segment, step, text, marked
    from (
        select *, text like '%Final validation metrics%' or contains(text, 'succeeded') or contains(text, 'State: COMPLETED')
                  or text like '%CPU Efficiency:%' or text like '%local_global_step_folder%'
                  or text like '%epoch %, step %' or text like '%Setting global step to%'
                  or text like '%Load from checkpoint folder%' as marked
        from lines
    )
    where marked or kind = 'step_metrics' or (kind = 'progress' and text like '%Training Progress%')
),
marked as (
    select run_id, file, line_no, segment, text from texts where marked
),
step_lines as (
    select run_id, file, line_no, segment, step, text from texts where kind = 'step_metrics'
),
files as materialized (
    -- each file of a run; a logger's side file (a W&B run's config or metadata beside its output.log, W&B's
    -- own debug logs) is no process's log
    select run_id, file, count(*) as n, max(ts) as last_ts, max(segment) as last_segment,
           regexp_matches(file, '(^|/)(config\.yaml|wandb-[a-z]+\.json|requirements\.txt|conda-environment\.yaml'
                                '|logs/debug(-internal)?\.log)$') as side_file
    from lines
    group by all
),
main_file as (
    -- the driver log: ordering prefers it, so a worker file's copy of a line never outranks it. The file
    -- with the most lines, but never a side file
    select run_id, arg_max(file, [not side_file, n]) as file
    from files
    group by all
),
final_segment as (
    select run_id, max(last_segment) as segment
    from files
    group by all
    union all by name
    -- a run of metrics alone (TensorBoard event files, no console log): the last segment of its steps
    select run_id, max(segment) as segment
    from step_phases
    where run_id in (select unnest($run_ids)) and run_id not in (select run_id from files)
    group by all
),
phases as (
    select * from step_phases where run_id in (select unnest($run_ids))
),
final_start as (
    -- the step the final segment started from: its first step line in the driver log is the
    -- validation line, which repeats the checkpoint's step
    select l.run_id, min(try_cast(regexp_extract(l.text, 'step:(\d+) - ', 1) as bigint)) as step
    from step_lines as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    group by all
),
steps as (
    select
        p.run_id,
        max(p.step) filter (where p.segment = f.segment) as last_step,
        count(*) as n_steps,
        median(p.step_time) as median_step_s,
        -- the longest a step took, its validation and checkpoint included
        max(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) as longest_step_s,
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
trained as (
    -- the final segment's last training step line, timed or not (a recipe's trimmed logger, a line cut before
    -- its timers): validation's own lines and GPU memory lines are no training step. The file logger's JSONL
    -- rows carry segment -1: they belong to the last start-up
    select m.run_id, max(m.step) as step
    from step_metrics as m
    join final_segment as f on f.run_id = m.run_id and (m.segment = f.segment or m.segment < 0)
    where m.run_id in (select unnest($run_ids)) and m.source not in ('memory_line', 'seed_timing')
      and not (m.key like 'val-%' or m.key like 'val/%')
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
new_run as (
    -- a segment that starts another run rather than resuming this one: the segment before it printed verl's
    -- final validation (that run completed) and this one starts from its first step, not from a checkpoint.
    -- The latest such segment begins the run the summary is about; the earlier runs are no part of its time
    select s.run_id, max(s.segment) as segment, count(*) as earlier_runs,
           arg_max(s.first_line_no, s.segment) as first_line_no
    from (
        select run_id, segment, min(line_no) as first_line_no,
               min(try_cast(regexp_extract(text, 'step:(\d+) - ', 1) as bigint)) as first_step
        from step_lines
        group by all
    ) as s
    where s.segment > 0 and s.first_step <= 1 and exists (
        select 1 from marked as m
        where m.run_id = s.run_id and m.segment = s.segment - 1 and m.text like '%Final validation metrics%')
    group by all
),
new_run_start as (
    -- when the last run of a log that holds several began: its first clock
    select l.run_id, min(l.ts) as started_at
    from lines as l
    join new_run as nr on nr.run_id = l.run_id and l.segment >= nr.segment
    where l.ts is not null
    group by all
),
attempts as (
    -- resumed runs: time of every step attempt, including the ones a resume repeated (of this run alone)
    select l.run_id, sum(try_cast(regexp_extract(l.text,
            'timing_s/step"?:\s*(?:np\.float\d+\()?([0-9.eE+-]+)', 1) as double)) as attempted_s
    from step_lines as l
    join run as r using (run_id)
    left join new_run as nr using (run_id)
    where r.n_segments > 1 and l.segment >= coalesce(nr.segment, 0)
    group by all
),
started as (
    -- the driver log's final segment printed a step line (even validation's step:0): start-up was over
    select distinct l.run_id
    from step_lines as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
),
final_validation as (
    select distinct l.run_id
    from marked as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    where l.text like '%Final validation metrics%'
),
job_succeeded as (
    -- the launcher reported success: a Ray job's final status, or SLURM's accounting epilogue
    select distinct l.run_id
    from marked as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    -- `case` keeps the cheap `contains` tests first: a regex over every line of a big log costs seconds
    where case when contains(l.text, 'succeeded') or contains(l.text, 'State: COMPLETED')
               then regexp_matches(l.text, 'Job ''[^'']+'' succeeded|State: COMPLETED \(exit code 0\)') else false end
),
bar_updates as (
    -- every print of verl's `Training Progress` tqdm bar in the driver log's final segment (a line may
    -- hold several, joined by tqdm's carriage returns): the count and the elapsed time it shows
    select run_id, line_no, text, unnest(counts)::bigint as n, unnest(totals)::bigint as total,
           unnest(elapsed) as elapsed,
           unnest(range(len(counts))) as k
    from (
        select l.run_id, l.line_no, l.text,
               regexp_extract_all(l.text, '(\d+)/\d+ \[(?:\d+:)?\d+:\d\d<', 1) as counts,
               regexp_extract_all(l.text, '\d+/(\d+) \[(?:\d+:)?\d+:\d\d<', 1) as totals,
               list_transform(regexp_extract_all(l.text, '\d+/\d+ \[((?:\d+:)?\d+:\d\d)<', 1),
                              lambda e: list_reduce(list_transform(string_split(e, ':'), lambda x: x::bigint),
                                               lambda a, b: a * 60 + b)) as elapsed
        from texts as l
        join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
        join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
        -- (a progress line among `texts` may be there for a notice it prints, not the bar)
        where l.kind = 'progress' and l.text like '%Training Progress%'
    )
),
bar as (
    -- the bar's last count; where it first showed that count, and how much time it then spent there
    select u.run_id, b.n,
           min(u.line_no) as first_line_no,
           max(u.elapsed) - min(u.elapsed) as stuck_s,
           arg_max(u.line_no, [u.line_no, u.k]) as last_line_no,
           arg_max(u.text, [u.line_no, u.k]) as last_text,
           arg_max(u.elapsed, [u.line_no, u.k]) as last_elapsed,
           arg_max(u.total, [u.line_no, u.k]) as total
    from bar_updates as u
    join (select run_id, arg_max(n, [line_no, k]) as n from bar_updates group by all) as b
        on b.run_id = u.run_id and b.n = u.n
    group by all
),
resumed_from as (
    -- the checkpoint the driver log's final segment resumed from: `Setting global step to N`, the folder it loaded
    select l.run_id, max(try_cast(coalesce(nullif(regexp_extract(l.text, 'Setting global step to (\d+)', 1), ''),
                                           nullif(regexp_extract(l.text, 'global_step_(\d+)', 1), '')) as bigint)) as step,
           max(l.line_no) as line_no
    from marked as l
    join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    where l.text like '%Setting global step to%' or l.text like '%Load from checkpoint folder%'
    group by all
),
run_state as (
    select
        run_id,
        last_step,
        expected_steps,
        final_segment,
        -- verl prints the final validation only once its last step is done, whatever the log kept of that step
        (expected_steps is not null and last_step >= expected_steps) or final_validation or job_succeeded
            as reached_end
    from (
        select
            r.run_id,
            -- step lines first; a run that prints none (a W&B-only logger) still moves its progress bar; a resumed
            -- run that got no further has done the steps of the checkpoint it resumed from
            coalesce(greatest(s.last_step, tr.step), b.n, fs.step, rf.step, 0) as last_step,
            -- the bar's total is verl's total_training_steps where the log prints no config
            coalesce(r.total_training_steps, b.total) as expected_steps,
            f.segment as final_segment,
            v.run_id is not null as final_validation,
            j.run_id is not null as job_succeeded
        from run as r
        left join final_segment as f using (run_id)
        left join steps as s using (run_id)
        left join trained as tr using (run_id)
        left join bar as b using (run_id)
        left join final_validation as v using (run_id)
        left join job_succeeded as j using (run_id)
        left join final_start as fs using (run_id)
        left join resumed_from as rf using (run_id)
    )
),
progress_point as (
    -- the driver-log line where the run last made progress: its last step line, or the bar's first print
    -- of that count when the step line came later only because the run was ending (stdout is buffered,
    -- stderr's bar and tracebacks are not: a Ctrl-C flushes the last step lines after its traceback)
    select s.run_id,
           -- (a resumed run that printed no step yet: the line where it resumed)
           case when rf.step = s.last_step and st.line_no is null and b.n is null then rf.line_no
                when b.n >= s.last_step and (st.line_no is null or exists (
                    select 1 from lines as l
                    where l.run_id = s.run_id and l.kind = 'error' and l.segment = s.final_segment
                      and l.line_no > b.first_line_no and l.line_no < st.line_no))
                then b.first_line_no else st.line_no end as line_no
    from run_state as s
    left join (
        select l.run_id, l.step, min(l.line_no) as line_no
        from step_lines as l
        join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
        join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
        group by all
    ) as st on st.run_id = s.run_id and st.step = s.last_step
    left join bar as b on b.run_id = s.run_id
    left join resumed_from as rf on rf.run_id = s.run_id
),
began as (
    -- training had begun: a step line (even validation's step:0) or the progress bar in the final segment, or
    -- the `epoch E, step N` early verl (and its forks) prints as each training step starts
    select s.run_id from run_state as s join started using (run_id)
    union
    select run_id from bar
    union
    select l.run_id
    from marked as l
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    where regexp_matches(l.text, '^(\([^)]*\) )?epoch \d+, step \d+\s*$')
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
    where e.run_id in (select unnest($run_ids)) and e.kind = 'error'
),
recurring as (
    -- error classes the final segment already survived in completed steps are noise, not its ending
    select distinct e.run_id, e.event_class
    from events as e
    join run_state as s using (run_id)
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
    join run_state as s using (run_id)
    where e.segment = s.final_segment
      and e.base_class in ('ray_task_error', 'hydra_wrapper', 'unhandled_ray_error', 'actor_died', 'worker_died')
),
final_attempt as (
    -- when the driver log's final segment began: another process's log that ended before was an earlier attempt's
    select l.run_id, min(l.ts) as started
    from lines as l
    join main_file as mf on mf.run_id = l.run_id and mf.file = l.file
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    -- the lines without a time left out before the joins, not after them
    where l.ts is not null
    group by all
),
after_progress as (
    -- the driver log's errors that may have ended the run: written in (or flushed just after) its last
    -- step, or after the line where it last made progress
    select e.*
    from events as e
    join run_state as s using (run_id)
    join progress_point as pp using (run_id)
    cross join params as p
    left join driver_failed as d using (run_id)
    left join files as f using (run_id, file)
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
    where run_id in (select unnest($run_ids))
),
last_nan as (
    -- the last logged step went NaN/inf in a loss or gradient: the run diverged
    select h.run_id, h.step
    from nan_steps as h
    join run_state as s on s.run_id = h.run_id and s.last_step = h.step
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
    where m.run_id in (select unnest($run_ids))
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
),
tail as (
    -- the driver log after its last progress; a line's text is its message, behind a container runtime's stamp
    -- and the Ray prefix
    select l.run_id, l.file, l.line_no, l.component, l.phase_hint, l.ts,
           regexp_replace(l.text, '^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) )?(?:\s*\([^)]*\)\s*)?', '')
               as text,
           -- Ray's autoscaler stamps its notices with the cluster's uptime: `(autoscaler +1h2m3s)`
           case when l.text like '(autoscaler +%' or l.text like '(scheduler +%' then list_sum(list_transform(
               regexp_extract_all(l.text, '^\((?:autoscaler|scheduler) \+(\d+h)?(\d+m)?(\d+s)?\)', 0)[1]
                   .regexp_extract_all('\d+[hms]'),
               lambda x: regexp_extract(x, '\d+')::bigint * case right(x, 1) when 'h' then 3600 when 'm' then 60 else 1 end)) end as uptime_s
    from lines as l
    -- the lines past each run's last progress in its driver log's final segment, looked up in one map of
    -- the runs (a join hashed the lines where its estimates put them on the build side: a 5 M-line run ran
    -- the connection out of memory)
    where l.line_no > coalesce((select map_from_entries(list({
              'k': {'run_id': s.run_id, 'segment': s.final_segment, 'file': mf.file},
              'v': coalesce(pp.line_no, 0)}))
          from run_state as s
          join main_file as mf using (run_id)
          left join progress_point as pp using (run_id))[{'run_id': l.run_id, 'segment': l.segment, 'file': l.file}],
          l.line_no)
      -- bounds every run shares, checked first
      and l.segment >= (select min(final_segment) from run_state)
      and l.line_no > (select min(coalesce(line_no, 0)) from progress_point)
),
tail_activity as (
    -- the last sign of work after the last progress: the phase a run stopped in. vLLM preempting
    -- sequences means it was generating; validation announces its batch and the end of its generation.
    -- After a stop the driver only flushes what it had buffered (old news); its workers still report.
    -- Before training began only two signs count: validation's notices (the initial validation) and an agent
    -- loop's tool calls (a rollout: an excerpt that shows none of the run's start)
    select t.run_id, arg_max(t.phase, t.line_no) as phase,
           arg_max(case when t.validating then 'testing' when t.tool_call then 'gen' end, t.line_no)
               filter (where t.validating or t.tool_call) as early_phase
    from (
        select *, regexp_matches(text, '(?i)tool call|executing tool') as tool_call, case
            -- a reward worker's own lines (verl's RewardManagerWorker, RewardLoopWorker): scoring
            when coalesce(component, '') like '%Reward%' then 'reward'
            -- vLLM preempting, rollout filtering and DAPO's dynamic sampling asking for another batch
            when regexp_matches(text, 'is preempted by PreemptionMode|Got \d+ samples after \d+ trials|Keep generating')
                 or coalesce(component, '') like '%LoopWorker%' then 'gen'
            when validating then 'testing'
            -- verl's checkpoint notices (the folder, each rank's saved files)
            when regexp_matches(text, 'local_global_step_folder|\] Saved (model|optim|extra_state|hf_model) to|Saved model config and tokenizer')
                then 'save_checkpoint'
            -- the reward manager prints a few scored samples, a custom reward function its scores: while training
            -- that is the reward phase
            when regexp_matches(text, '^\[(prompt|response|ground_truth|score)\]|(?i)^\W*(\w+ )?score\W*(:\s*-?[\d.]+\s*)?$')
                then 'reward'
            -- "validation" in free text (a reward function's own debug prints) is no sign of verl validating
            when phase_hint = 'testing' then null
            else phase_hint end as phase
        from (
            select *, bool_or(text like '%test_gen_batch meta info%' or text like '%validation generation end%')
                          over (partition by run_id order by line_no) as validating
            from tail
        )
        -- the config dump's pprint lines name settings, a hard-wrapped step line's pieces timers: not work
        where not regexp_matches(text, '^\s*[{''"]|[\w/@.-]+:\S+ - [\w/@.-]+:\S+')
    ) as t
    left join stop as st on st.run_id = t.run_id
    where t.phase is not null
      and (t.line_no < coalesce(st.line_no, t.line_no + 1)
           or coalesce(t.component, 'TaskRunner') not in ('TaskRunner', 'main_task'))
    group by all
),
tail_clock as (
    -- the clock each tail line prints, in any of verl's formats: ISO (Python logging, Ray), glog
    -- `I0718 19:14:23`, vLLM `INFO 07-18 19:14:23`. Most carry no year: clocks are compared within one
    -- day. Ray's uptime is a clock of its own, never compared with the others
    select run_id, file, line_no, text, clock, uptime_s is not null as uptime
    from (
        select t.*, coalesce(
            make_timestamp(2000, month(t.ts), day(t.ts), hour(t.ts), minute(t.ts), second(t.ts)),
            try_cast('2000-' || md.mo || '-' || md.d || ' ' || md.t as timestamp),
            timestamp '2000-01-01' + to_seconds(t.uptime_s)) as clock
        from (
            select *, regexp_extract(text,
                '(?:^|[\s\[(])(?:[IWEF]|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) )(\d\d)-?(\d\d) (\d\d:\d\d:\d\d)',
                ['mo', 'd', 't']) as md
            from tail
            -- what follows a stop (Ctrl-C, a cancel) is shutdown, not a stall
            where line_no <= coalesce((select min(st.line_no) from stop as st where st.run_id = tail.run_id), line_no)
        ) as t
    )
    where clock is not null
),
clock_stall as (
    -- time that passed after the last progress while the log kept printing
    select run_id, max(span_s) as span_s, arg_max(file, span_s) as file,
           arg_max(line_no, span_s) as line_no, arg_max(text, span_s) as text
    from (
        select run_id, uptime, epoch(max(clock) - min(clock)) as span_s,
               arg_max(file, [epoch(clock), line_no]) as file, arg_max(line_no, [epoch(clock), line_no]) as line_no,
               arg_max(text, [epoch(clock), line_no]) as text
        from tail_clock
        group by all
        -- a year boundary between two yearless clocks is not a stall
        having epoch(max(clock) - min(clock)) < 7 * 86400
    )
    group by all
),
scheduler_idle as (
    -- SLURM's epilogue: the job sat at almost no CPU (a stall the scheduler then ended)
    select l.run_id, min(try_cast(regexp_extract(l.text, 'CPU Efficiency: ([0-9.]+)%', 1) as double)) as cpu_pct,
           arg_min(l.line_no, l.line_no) as line_no, arg_min(l.file, l.line_no) as file,
           arg_min(l.text, l.line_no) as text
    from marked as l
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    where l.text like '%CPU Efficiency:%'
    group by all
),
debugger as (
    -- the line saying it waits, else the one saying where the debugger listens (Ray's distributed debugger, or
    -- the older `ray debug` RemotePdb); `attached` when the latest of these lines is a client connecting: a
    -- person holds the run at the breakpoint
    select run_id, arg_min(file, [waiting, line_no]) filter (where not attached) as file,
           arg_min(line_no, [waiting, line_no]) filter (where not attached) as line_no,
           arg_min(text, [waiting, line_no]) filter (where not attached) as text,
           arg_max(attached, line_no) as attached
    from (select *, case when text like '%Waiting for debugger to attach%' then 0 else 1 end as waiting,
                 text like '%Debugger client is connected%' or text like '%RemotePdb accepted connection%' as attached
          from tail)
    where text like '%Ray debugger is listening%' or text like '%Waiting for debugger to attach%'
       or text like '%RemotePdb session open at%' or attached
    group by all
),
held as (
    -- a debugger client attached at the breakpoint: held on purpose, not stalled
    select run_id, file, line_no, text from debugger where attached and line_no is not null
),
stall_notices as (
    -- messages that each say time passed without progress, repeating until the log ends: the rollout engine's own
    -- stall warning (vLLM's shm_broadcast: each one is that many seconds its workers did not move), Ray unable to
    -- schedule a resource request, a remote service (a retriever, a reward server) refusing connections or
    -- answering an error while the run retries it. The time they cover: the seconds they state (vLLM's interval,
    -- a retry's `Retrying in 10.0s`), else their clocks
    select n.run_id, n.notice, count(*) as n,
           arg_min(n.file, n.line_no) as file, min(n.line_no) as line_no, arg_min(n.text, n.line_no) as text,
           max(n.line_no) as last_line_no,
           greatest(sum(n.stated_s), epoch(max(c.clock) filter (where c.uptime) - min(c.clock) filter (where c.uptime)),
                    epoch(max(c.clock) filter (where not c.uptime) - min(c.clock) filter (where not c.uptime))) as waited_s
    from (
        select *, case
            when regexp_matches(text, 'No available (shared memory broadcast )?block found in \d+ second')
                then try_cast(regexp_extract(text, 'found in (\d+) second', 1) as double)
            else try_cast(nullif(regexp_extract(text, '(?i)retry(?:ing)? in (\d+(?:\.\d+)?) ?s', 1), '') as double)
        end as stated_s
        from (
            select *, case
                when regexp_matches(text, 'No available (shared memory broadcast )?block found in \d+ second') then 'engine_stall'
                when contains(text, 'cannot be scheduled right now') then 'unschedulable'
                -- urllib3/requests/aiohttp failures and HTTP error answers; Ray's metrics exporter retries are noise
                when regexp_matches(text, '(?i)connection refused|failed to establish a new connection|max retries exceeded'
                                          '|connection reset by peer|remote ?disconnected|server disconnected|cannot connect to host'
                                          '|\b(?:status(?:[ _]code)?|http(?:/\d(?:\.\d)?)?|error code)\W{0,3}(?:5\d\d|429)\b'
                                          '|internal server error|service unavailable|bad gateway|gateway time-?out|too many requests')
                     and not regexp_matches(text, '(?i)metrics exporter|exporter agent') then 'service_retry'
            end as notice
            from tail
        )
    ) as n
    left join tail_clock as c using (run_id, file, line_no)
    where n.notice is not null
    group by all
),
stall_notice as (
    -- the first kind of notice that went on until the log's end (its last one among the driver log's last lines)
    -- and covered a stall's time (or, stating none, repeated many times)
    select n.run_id, arg_min(n.notice, n.line_no) as notice, arg_min(n.n, n.line_no) as n,
           arg_min(n.file, n.line_no) as file, min(n.line_no) as line_no, arg_min(n.text, n.line_no) as text,
           arg_min(n.waited_s, n.line_no) as waited_s
    from stall_notices as n
    join (select run_id, max(line_no) as end_line_no from tail group by all) as e using (run_id)
    cross join params as p
    where n.n >= 2 and n.last_line_no >= e.end_line_no - p.notice_end_lines
      and coalesce(n.waited_s >= p.min_stall_s, n.n >= p.notice_min_count)
    group by all
),
disk_pressure as (
    select distinct run_id from tail where text like '%file_system_monitor%is over 95% full%'
),
stall as (
    -- evidence that the run stalled, strongest first: a waiting debugger, a scheduler epilogue at ~0% CPU,
    -- notices that each say time passed without progress, then time with no progress (from the bar's own
    -- elapsed time or the lines' clocks) beyond what a step takes
    select
        s.run_id,
        greatest(cs.span_s, case when b.n >= s.last_step then b.stuck_s end) as stalled_s,
        case
            when bg.run_id is null then p.startup_stall_s
            -- in the first step of an attempt (from scratch or after a resume) nothing says how long this
            -- attempt's step takes: lines that keep coming for a while may be a slow first rollout, so only a
            -- longer silence of progress counts (the bar's own elapsed time at an unchanged count is stronger
            -- evidence and keeps the shorter limit)
            when tr.step is null and coalesce(b.n, 0) <= coalesce(fs.step, 0)
                 and coalesce(b.stuck_s, 0) < coalesce(cs.span_s, 0) then greatest(p.first_step_stall_s,
                     p.stall_step_factor * coalesce(st.median_step_s, 0))
            else greatest(p.min_stall_s, st.longest_step_s, p.stall_step_factor * coalesce(
                st.median_step_s, b.last_elapsed / nullif(b.n, 0), 0))
        end as limit_s,
        case
            when d.run_id is not null and not d.attached then 'debugger'
            when si.cpu_pct < p.idle_cpu_pct and sp.stop_reason in ('time_limit', 'cancelled') then 'scheduler'
            when sn.run_id is not null then sn.notice
            when coalesce(b.stuck_s, 0) >= coalesce(cs.span_s, 0) and b.n >= s.last_step then 'bar'
            when cs.span_s is not null then 'clock'
        end as evidence,
        si.cpu_pct, b.n as bar_n, b.stuck_s as bar_stuck_s,
        case when bg.run_id is null then 'during start-up' else 'after step ' || s.last_step end as when_text
    from run_state as s
    cross join params as p
    left join began as bg using (run_id)
    left join step_totals as st using (run_id)
    left join bar as b using (run_id)
    left join clock_stall as cs using (run_id)
    left join scheduler_idle as si using (run_id)
    left join debugger as d using (run_id)
    left join stop as sp using (run_id)
    left join stall_notice as sn using (run_id)
    left join trained as tr using (run_id)
    left join final_start as fs using (run_id)
),
hang as (
    -- a stalled run: the reason in words, how long, and the line that shows it
    select
        h.run_id,
        case when h.evidence in ('engine_stall', 'unschedulable', 'service_retry')
             then greatest(h.stalled_s, sn.waited_s) else h.stalled_s end as hang_duration_s,
        case h.evidence
            when 'debugger' then 'paused at a Ray debugger breakpoint, waiting for a debugger to attach'
            when 'scheduler' then format('the scheduler ended it after a stall: CPU efficiency {}%', h.cpu_pct)
            when 'engine_stall' then format('the rollout engine stalled: {} shared-memory broadcast warnings ({} min with '
                                            'no progress) {}, until the log ends', sn.n,
                                            round(sn.waited_s / 60, 1), h.when_text)
            when 'unschedulable' then format('Ray could not schedule a resource request: {} "cannot be scheduled" '
                                             'warnings{} {}, until the log ends', sn.n,
                                             coalesce(format(' over {} min', round(sn.waited_s / 60, 1)), ''), h.when_text)
            when 'service_retry' then format('a remote service kept failing (refused or answered an error) {} times{} '
                                             '{}, retried until the log ends', sn.n,
                                             coalesce(format(' over {} min', round(sn.waited_s / 60, 1)), ''), h.when_text)
            when 'bar' then format('no progress for {} min: the Training Progress bar stayed at {} (its own elapsed time)',
                                   round(h.stalled_s / 60, 1), h.bar_n)
            else format('no progress for {} min after step {}: the log kept printing (its own timestamps) with no new step',
                        round(h.stalled_s / 60, 1), s.last_step)
        end || case when dp.run_id is not null then '; Ray''s session disk is over 95% full' else '' end as hang_reason,
        case h.evidence when 'debugger' then d.file when 'scheduler' then si.file
                        when 'bar' then mf.file when 'clock' then cs.file else sn.file end as file,
        case h.evidence when 'debugger' then d.line_no when 'scheduler' then si.line_no
                        when 'bar' then b.last_line_no when 'clock' then cs.line_no else sn.line_no end as line_no,
        case h.evidence when 'debugger' then d.text when 'scheduler' then si.text
                        when 'bar' then regexp_replace(b.last_text, '^.*\r', '') when 'clock' then cs.text
                        else sn.text end as text
    from stall as h
    join run_state as s using (run_id)
    join main_file as mf using (run_id)
    left join bar as b using (run_id)
    left join clock_stall as cs using (run_id)
    left join scheduler_idle as si using (run_id)
    left join debugger as d using (run_id)
    left join disk_pressure as dp using (run_id)
    left join held as hd using (run_id)
    left join stall_notice as sn using (run_id)
    where hd.run_id is null
      and (h.evidence in ('debugger', 'scheduler', 'engine_stall', 'unschedulable', 'service_retry')
           or h.stalled_s >= h.limit_s)
),
last_line as (
    -- the run's last line: the end of the file whose clock reads latest (the lines after its last stamp were
    -- written later still, a caught error's stamp is no end), else of the longest file; found per file without
    -- its text (plain maxima: a list key per line costs seconds on a big log), then its text read for it alone
    -- (its blank lines, a bare Ray prefix too, skipped among the file's last hundred lines: only those are read)
    select k.run_id, k.file, arg_max(l.line_no, l.line_no) as line_no, arg_max(l.text, l.line_no) as text
    from (
        select run_id, arg_max(file, [t, n]) as file, arg_max(n, [t, n]) as line_no
        from (select run_id, file, max(coalesce(epoch(ts), 0)) as t, max(line_no) as n from lines group by all)
        group by all
    ) as k
    join lines as l on l.run_id = k.run_id and l.file = k.file and l.line_no between k.line_no - 100 and k.line_no
    where trim(regexp_replace(l.text, '^\s*\([^)]*\)', '')) <> ''
    group by all
),
verdict as (
    -- the first cause in time wins: an error before a stop ended the run, a stall or NaN losses before a stop too
    -- (a stall outranks NaN losses before it)
    select
        s.run_id,
        case
            when s.reached_end then 'completed'
            when c.failure_class is not null and c.first_position < coalesce(sp.position, c.first_position + 1) then
                case when c.tier > 1 and n.run_id is not null then 'nan_divergence' else c.failure_class end
            when h.run_id is not null then 'hang'
            -- the last step's losses went NaN before whatever stopped or held the run after it
            when n.run_id is not null then 'nan_divergence'
            when hd.run_id is not null then 'interrupted'
            when sp.run_id is not null then 'interrupted'
            else 'no_outcome'
        end as failure_class
    from run_state as s
    left join cause as c using (run_id)
    left join stop as sp using (run_id)
    left join hang as h using (run_id)
    left join held as hd using (run_id)
    left join last_nan as n using (run_id)
),
checkpoint as (
    -- the last step whose checkpoint was written (its timer, or the folder verl prints), counting only
    -- steps whose results the final segment kept
    select run_id, max(step) as step
    from (
        select p.run_id, p.step
        from phases as p
        join final_segment as f using (run_id)
        left join final_start as fs using (run_id)
        where p.save_checkpoint is not null and (p.segment = f.segment or p.step <= coalesce(fs.step, 0))
        union all
        select l.run_id, try_cast(nullif(regexp_extract(l.text, 'global_step_(\d+)', 1), '') as bigint)
        from marked as l
        join final_segment as f on f.run_id = l.run_id and f.segment = l.segment
        where l.text like '%local_global_step_folder%'
    )
    group by all
),
kept as (
    -- time in the steps a checkpoint preserved
    select p.run_id, sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) as kept_s
    from phases as p
    join final_segment as f using (run_id)
    left join final_start as fs using (run_id)
    join checkpoint as c using (run_id)
    where (p.segment = f.segment or p.step <= coalesce(fs.step, 0)) and p.step <= c.step
    group by all
),
running as (
    -- time the job was running: each resume segment's own span, not the days between attempts, nor an
    -- earlier run's in the same log
    select run_id, sum(span_s) as running_s
    from (select l.run_id, l.segment, epoch(max(l.ts) - min(l.ts)) as span_s
          from lines as l
          left join new_run as nr using (run_id)
          where l.ts is not null and l.segment >= coalesce(nr.segment, 0)
          group by all)
    group by all
),
training as (
    -- a training collapse or divergence that had not recovered (run_training): the steps from its onset on
    -- produced nothing worth keeping
    select t.run_id, t.training_outcome, t.training_outcome_step,
           sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0))
               filter (where p.step < t.training_outcome_step) as before_onset_s
    from run_training as t
    join final_segment as f using (run_id)
    left join phases as p on p.run_id = t.run_id and p.segment = f.segment
    where t.run_id in (select unnest($run_ids))
    group by all
),
time_use as (
    -- goodput (docs/diagnosis.md): time in steps whose results survive (all of them for a run that
    -- completed or is still going, else up to its last checkpoint; never from the onset of a training
    -- collapse on) over the time the job ran, a hang included
    select
        s.run_id,
        -- null, not 0 s, where no clock or timer of the log measures any time: unknown stays unknown
        nullif(greatest(coalesce(ru.running_s, 0), coalesce(a.attempted_s, 0),
                        coalesce(st.counted_s, 0) + case when v.failure_class = 'hang'
                                                         then coalesce(h.hang_duration_s, 0) else 0 end), 0)
            as wall_time_s,
        least(case when v.failure_class in ('completed', 'no_outcome') then st.counted_s else coalesce(k.kept_s, 0) end,
              coalesce(tr.before_onset_s, case when tr.run_id is not null then 0 end)) as kept_s,
        c.step as last_checkpoint_step,
        case when v.failure_class in ('completed', 'no_outcome') then 0
             else greatest(s.last_step - coalesce(c.step, 0), 0) end as steps_lost
    from run_state as s
    join verdict as v using (run_id)
    left join step_totals as st using (run_id)
    left join attempts as a using (run_id)
    left join running as ru using (run_id)
    left join hang as h using (run_id)
    left join checkpoint as c using (run_id)
    left join kept as k using (run_id)
    left join training as tr using (run_id)
)
select
    r.run_id,
    v.failure_class,
    s.last_step,
    s.expected_steps,
    s.last_step / nullif(s.expected_steps, 0) as completion,
    case when v.failure_class = 'hang' then h.file when v.failure_class = 'interrupted' then coalesce(hd.file, sp.file)
         when v.failure_class = 'nan_divergence' and rt.run_id is null then nl.file
         when v.failure_class not in ('completed', 'no_outcome') then rt.root_cause_file end as root_cause_file,
    case when v.failure_class = 'hang' then h.line_no when v.failure_class = 'interrupted' then coalesce(hd.line_no, sp.line_no)
         when v.failure_class = 'nan_divergence' and rt.run_id is null then nl.line_no
         when v.failure_class not in ('completed', 'no_outcome') then rt.root_cause_line_no end as root_cause_line_no,
    case when v.failure_class = 'hang' then h.text when v.failure_class = 'interrupted' then coalesce(hd.text, sp.message)
         when v.failure_class = 'nan_divergence' and rt.run_id is null then nl.text
         when v.failure_class not in ('completed', 'no_outcome') then rt.root_cause_text end as root_cause_text,
    case when v.failure_class = 'hang' then h.hang_reason end as hang_reason,
    case when v.failure_class = 'hang' then h.hang_duration_s end as hang_duration_s,
    -- a run whose losses went NaN keeps how it was then stopped
    case when v.failure_class in ('interrupted', 'nan_divergence') then
         case when hd.run_id is not null then 'debugger' else sp.stop_reason end end as stop_reason,
    tr.training_outcome,
    tr.training_outcome_step,
    case when v.failure_class not in ('completed', 'hang', 'no_outcome', 'interrupted')
         then rt.root_cause_event end as root_cause_event,
    -- what the root-cause line says beyond its class (pipeline/vocabulary.py FAILURE_DETAILS): the device whose
    -- memory ran out, a rendezvous that failed rather than a collective the NCCL watchdog timed out
    case
        when v.failure_class = 'cuda_oom' then case
            when regexp_matches(rt.root_cause_text, 'TPU|memory space hbm') then 'tpu_hbm_oom'
            when regexp_matches(rt.root_cause_text, 'NPU|npu|Ascend') then 'npu_oom'
            when regexp_matches(rt.root_cause_text, 'CUDA|cuda|GPU') or rt.root_cause_event = 'cuda_oom'
                then 'cuda_oom'
            else 'device_oom' end
        when v.failure_class = 'nccl_timeout' then
            case when rt.root_cause_event = 'distributed_init_error' then 'rendezvous' else 'nccl_watchdog' end
    end as failure_detail,
    case
        when v.failure_class = 'completed' then null
        -- before the first training step began, a run was starting up (or validating, if a traceback says so)
        when bg.run_id is null and dp.phase is null then coalesce(ta.early_phase, 'startup')
        when v.failure_class in ('hang', 'interrupted', 'no_outcome') then coalesce(
            ta.phase,
            -- a stalled run that printed no sign of work: fit() starts every step by generating
            case when v.failure_class = 'hang' then 'gen' end)
        -- the innermost verl call of the driver's traceback, else the timers printed so far in the step
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
    -- a log may carry timestamps only around start-up, so the time is at least the time in steps
    tu.wall_time_s,
    case when tu.wall_time_s > 0 then least(tu.kept_s / tu.wall_time_s, 1) end as goodput,
    -- the run's time that no checkpoint kept, on every GPU it held (a completed run or one still going lost
    -- none); null where the log says neither its time nor its GPUs
    case when v.failure_class in ('completed', 'no_outcome') then 0
         else greatest(tu.wall_time_s - coalesce(tu.kept_s, 0), 0) * r.n_gpus_per_node * coalesce(r.nnodes, 1) / 3600
    end as gpu_hours_lost,
    tu.last_checkpoint_step,
    tu.steps_lost,
    greatest(coalesce(r.n_segments, 1) - 1 - coalesce(nr.segment, 0), 0) as resume_count,
    -- runs that completed earlier in the same log (a new launch after a final validation), and the line in the
    -- driver log where the run this summary is about printed its first step
    coalesce(nr.earlier_runs, 0) as earlier_runs,
    nr.first_line_no as run_first_line_no,
    -- a divergence's first cause in time: the first step line of the non-finite stretch that ended the run
    case when v.failure_class = 'nan_divergence' then od.step end as onset_step,
    case when v.failure_class = 'nan_divergence' then od.file end as onset_file,
    case when v.failure_class = 'nan_divergence' then od.line_no end as onset_line_no,
    case when v.failure_class = 'nan_divergence' then ol.text end as onset_text,
    case when v.failure_class = 'nan_divergence' then od.keys end as onset_keys,
    r.n_metric_values::double / nullif(r.n_metric_values + r.n_parse_failures, 0) as parse_completeness,
    -- a step of this analysis that failed on this run alone (pipeline/isolation.py)
    nullif(array_to_string(list_filter(r.problems, lambda p: starts_with(p, $not_analysed)), '; '), '')
        as analysis_error,
    -- the run's first clock: in a log that holds several runs, the last run's own
    r.* exclude (run_id) replace (coalesce(nrs.started_at, r.first_ts) as first_ts)
from run as r
left join run_state as s using (run_id)
left join verdict as v using (run_id)
left join root as rt using (run_id)
left join tail_activity as ta using (run_id)
left join hang as h using (run_id)
left join stop as sp using (run_id)
left join held as hd using (run_id)
left join nan_line as nl using (run_id)
left join began as bg using (run_id)
left join driver_phase as dp using (run_id)
left join last_line as ll using (run_id)
left join run_bottleneck as b using (run_id)
left join step_totals as st using (run_id)
left join time_use as tu using (run_id)
left join training as tr using (run_id)
left join new_run as nr using (run_id)
left join new_run_start as nrs using (run_id)
left join divergence_onset as od using (run_id)
left join lines as ol on ol.run_id = od.run_id and ol.file = od.file and ol.line_no = od.line_no
order by r.run_id
