-- One row per file of a run: its lines, its last line's number, last clock and last resume segment, whether it is
-- a logger's side file, and whether it is the run's driver log. run_progress, run_cause and run_stall read which
-- file is the driver's.
--
with files as (
    -- each file of a run; a logger's side file (a W&B run's config or metadata beside its output.log, W&B's
    -- own debug logs) is no process's log
    select run_id, file, count(*) as n, max(line_no) as last_line_no, max(ts) as last_ts,
           max(segment) as last_segment,
           regexp_matches(file, '(^|/)(config\.yaml|wandb-[a-z]+\.json|requirements\.txt|conda-environment\.yaml'
                                '|logs/debug(-internal)?\.log)$') as side_file
    from log_lines
    group by all
)
select *,
    -- the driver log: ordering prefers it, so a worker file's copy of a line never outranks it. The file
    -- with the most lines, but never a side file
    file = arg_max(file, [not side_file, n]) over (partition by run_id) as is_main
from files
