-- One row per run: the resume segment its log's last launch begins with (0 where the log holds one run), the runs
-- earlier launches left in the same log, and the last launch's first step line and its file. A segment starts
-- another run rather than resuming this one when the segment before it printed verl's final validation (that run
-- completed) and it starts from its first step, not from a checkpoint. The log's report is about its last run:
-- the per-step tables (step_phases, step_health) and everything read from step_metrics keep only that launch's
-- steps.
with lines as (
    -- only a log of several segments can hold several launches: a log of one reads no text
    select l.run_id, l.file, l.segment, l.line_no, l.kind, l.text
    from log_lines as l
    join runs as r using (run_id)
    where r.n_segments > 1 and (l.kind = 'step_metrics' or contains(l.text, 'Final validation metrics'))
),
segment_starts as (
    select run_id, segment, arg_min(file, line_no) as file, min(line_no) as first_line_no,
           min(try_cast(regexp_extract(text, 'step:(\d+) - ', 1) as bigint)) as first_step
    from lines
    where kind = 'step_metrics'
    group by all
),
new_run as (
    select s.run_id, max(s.segment) as segment, count(*) as earlier_runs,
           arg_max(s.first_line_no, s.segment) as first_line_no, arg_max(s.file, s.segment) as file
    from segment_starts as s
    where s.segment > 0 and s.first_step <= 1 and exists (
        select 1 from lines as m
        where m.run_id = s.run_id and m.segment = s.segment - 1 and contains(m.text, 'Final validation metrics'))
    group by all
)
select r.run_id, coalesce(n.segment, 0) as launch_segment, coalesce(n.earlier_runs, 0) as earlier_runs,
       n.first_line_no as launch_first_line_no, n.file as launch_file
from runs as r
left join new_run as n using (run_id)
