-- One row per run: how far it got (its last step, the steps it was meant to run, whether it reached the end),
-- the driver-log line where it last made progress, whether training began, verl's progress bar, and the runs an
-- earlier launch left in the same log. run_cause, run_stall, run_step_time and run_summary read it.
--
-- every line whose text the checks below read, but the tail's: the step lines, the progress bar's prints and
-- the few lines the end-of-run checks look for (`marked`), in one scan of the text (each scan of a 300 MB log's
-- text cost ~0.3 s, each check reading every line's text again ~0.4 s)
with texts as materialized (
    select run_id, file, line_no, kind, segment, step, text, marked
    from (
        select *, text like '%Final validation metrics%' or contains(text, 'succeeded') or contains(text, 'State: COMPLETED')
                  or text like '%CPU Efficiency:%' or text like '%local_global_step_folder%'
                  or text like '%epoch %, step %' or text like '%Setting global step to%'
                  or text like '%Load from checkpoint folder%' as marked
        from log_lines
    )
    where marked or kind = 'step_metrics' or (kind = 'progress' and text like '%Training Progress%')
),
marked as (
    select run_id, file, line_no, segment, text from texts where marked
),
step_lines as (
    select run_id, file, line_no, segment, step, text from texts where kind = 'step_metrics'
),
main_file as (select run_id, file from run_files where is_main),
final_segment as (
    select run_id, max(last_segment) as segment
    from run_files
    group by all
    union all by name
    -- a run of metrics alone (TensorBoard event files, no console log): the last segment of its steps
    select run_id, max(segment) as segment
    from step_phases
    where run_id not in (select run_id from run_files)
    group by all
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
timed as (
    -- the final segment's last timed step
    select p.run_id, max(p.step) filter (where p.segment = f.segment) as last_step
    from step_phases as p
    join final_segment as f using (run_id)
    group by all
),
trained as (
    -- the final segment's last training step line, timed or not (a recipe's trimmed logger, a line cut before
    -- its timers): validation's own lines and GPU memory lines are no training step. The file logger's JSONL
    -- rows carry segment -1: they belong to the last start-up
    select m.run_id, max(m.step) as step
    from step_metrics as m
    join final_segment as f on f.run_id = m.run_id and (m.segment = f.segment or m.segment < 0)
    where m.source not in ('memory_line', 'seed_timing')
      and not (m.key like 'val-%' or m.key like 'val/%')
    group by all
),
new_run as (
    -- the log's last launch, where earlier runs completed before it in the same log: the run the summary is
    -- about; the earlier runs are no part of its time
    select run_id, launch_segment as segment, earlier_runs, launch_first_line_no as first_line_no
    from run_launches
    where launch_segment > 0
),
new_run_start as (
    -- when the last run of a log that holds several began: its first clock
    select l.run_id, min(l.ts) as started_at
    from log_lines as l
    join new_run as nr on nr.run_id = l.run_id and l.segment >= nr.segment
    where l.ts is not null
    group by all
),
attempts as (
    -- resumed runs: time of every step attempt, including the ones a resume repeated (of this run alone)
    select l.run_id, sum(try_cast(regexp_extract(l.text,
            'timing_s/step"?:\s*(?:np\.float\d+\()?([0-9.eE+-]+)', 1) as double)) as attempted_s
    from step_lines as l
    join runs as r using (run_id)
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
        from runs as r
        left join final_segment as f using (run_id)
        left join timed as s using (run_id)
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
                    select 1 from log_lines as l
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
saved_folder as (
    -- the last checkpoint folder verl printed in the final segment (run_step_time counts the steps it kept)
    select l.run_id, max(try_cast(nullif(regexp_extract(l.text, 'global_step_(\d+)', 1), '') as bigint)) as step
    from marked as l
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    where l.text like '%local_global_step_folder%'
    group by all
),
scheduler_idle as (
    -- SLURM's epilogue: the job sat at almost no CPU (run_stall: a stall the scheduler then ended)
    select l.run_id, min(try_cast(regexp_extract(l.text, 'CPU Efficiency: ([0-9.]+)%', 1) as double)) as cpu_pct,
           min(l.line_no) as line_no, arg_min(l.file, l.line_no) as file, arg_min(l.text, l.line_no) as text
    from marked as l
    join run_state as s on s.run_id = l.run_id and s.final_segment = l.segment
    where l.text like '%CPU Efficiency:%'
    group by all
)
select
    r.run_id, s.final_segment, fs.step as final_start_step, tr.step as trained_step,
    s.last_step, s.expected_steps, s.reached_end, pp.line_no as progress_line_no, bg.run_id is not null as began,
    b.n as bar_n, b.first_line_no as bar_first_line_no, b.stuck_s as bar_stuck_s, b.last_line_no as bar_last_line_no,
    b.last_text as bar_last_text, b.last_elapsed as bar_last_elapsed,
    nr.segment as new_run_segment, coalesce(nr.earlier_runs, 0) as earlier_runs, nr.first_line_no as run_first_line_no,
    nrs.started_at as run_started_at, a.attempted_s, sf.step as saved_folder_step,
    si.cpu_pct as idle_cpu_pct, si.file as idle_file, si.line_no as idle_line_no, si.text as idle_text
from runs as r
left join run_state as s using (run_id)
left join final_start as fs using (run_id)
left join trained as tr using (run_id)
left join progress_point as pp using (run_id)
left join (select distinct run_id from began) as bg using (run_id)
left join bar as b using (run_id)
left join new_run as nr using (run_id)
left join new_run_start as nrs using (run_id)
left join attempts as a using (run_id)
left join saved_folder as sf using (run_id)
left join scheduler_idle as si using (run_id)
