-- One row per run: how it ended (failure_class, root-cause line, phase), how far it got, where its time went, and
-- its config facts: the join of run_progress, run_step_time, run_cause and run_stall, with the verdict (the first
-- cause in time wins), goodput and the run's last line. Bound parameters: $not_analysed VARCHAR.
with last_line as (
    -- the run's last line: the end of the file whose clock reads latest (the lines after its last stamp were
    -- written later still, a caught error's stamp is no end), else of the longest file; the file found in
    -- run_files, then its text read for it alone (its blank lines, a bare Ray prefix too, skipped among the file's
    -- last hundred lines: only those are read). Taken from run_files, the file is a few rows to DuckDB, so the
    -- join holds them and reads the log's lines past them: estimated as many rows as the log, a group by over
    -- log_lines made the join hold every line's text instead (out of memory on a 300 MB log)
    select k.run_id, k.file, arg_max(l.line_no, l.line_no) as line_no, arg_max(l.text, l.line_no) as text
    from (
        select run_id, arg_max(file, [t, n]) as file, arg_max(n, [t, n]) as line_no
        from (select run_id, file, coalesce(epoch(last_ts), 0) as t, last_line_no as n from run_files)
        group by all
    ) as k
    join log_lines as l on l.run_id = k.run_id and l.file = k.file and l.line_no between k.line_no - 100 and k.line_no
    where trim(regexp_replace(l.text, '^\s*\([^)]*\)', '')) <> ''
    group by all
),
verdict as (
    -- the first cause in time wins: an error before a stop ended the run, a stall or NaN losses before a stop too
    -- (a stall outranks NaN losses before it)
    select
        r.run_id,
        case
            when p.reached_end then 'completed'
            when c.cause_class is not null and c.cause_position < coalesce(c.stop_position, c.cause_position + 1) then
                case when c.cause_tier > 1 and c.nan_at_end then 'nan_divergence' else c.cause_class end
            when x.hung then 'hang'
            -- the last step's losses went NaN before whatever stopped or held the run after it
            when c.nan_at_end then 'nan_divergence'
            when x.held then 'interrupted'
            when c.stop_position is not null then 'interrupted'
            else 'no_outcome'
        end as failure_class
    from runs as r
    left join run_progress as p using (run_id)
    left join run_cause as c using (run_id)
    left join run_stall as x using (run_id)
),
time_use as (
    -- goodput (docs/diagnosis.md): time in steps whose results survive (all of them for a run that
    -- completed or is still going, else up to its last checkpoint; never from the onset of a training
    -- collapse on) over the time the job ran, a hang included
    select
        r.run_id,
        -- null, not 0 s, where no clock or timer of the log measures any time: unknown stays unknown
        nullif(greatest(coalesce(t.running_s, 0), coalesce(p.attempted_s, 0),
                        coalesce(t.counted_s, 0) + case when v.failure_class = 'hang'
                                                        then coalesce(x.hang_duration_s, 0) else 0 end), 0)
            as wall_time_s,
        least(case when v.failure_class in ('completed', 'no_outcome') then t.counted_s
                   else coalesce(t.checkpoint_kept_s, 0) end,
              coalesce(t.before_onset_s, case when t.collapsed then 0 end)) as kept_s,
        t.last_checkpoint_step,
        case when v.failure_class in ('completed', 'no_outcome') then 0
             else greatest(p.last_step - coalesce(t.last_checkpoint_step, 0), 0) end as steps_lost
    from runs as r
    join verdict as v using (run_id)
    left join run_progress as p using (run_id)
    left join run_step_time as t using (run_id)
    left join run_stall as x using (run_id)
)
select
    r.run_id,
    v.failure_class,
    p.last_step,
    p.expected_steps,
    p.last_step / nullif(p.expected_steps, 0) as completion,
    case when v.failure_class = 'hang' then x.hang_file when v.failure_class = 'interrupted' then coalesce(x.held_file, c.stop_file)
         when v.failure_class = 'nan_divergence' and c.cause_class is null then c.nan_line_file
         when v.failure_class not in ('completed', 'no_outcome') then c.root_cause_file end as root_cause_file,
    case when v.failure_class = 'hang' then x.hang_line_no when v.failure_class = 'interrupted' then coalesce(x.held_line_no, c.stop_line_no)
         when v.failure_class = 'nan_divergence' and c.cause_class is null then c.nan_line_no
         when v.failure_class not in ('completed', 'no_outcome') then c.root_cause_line_no end as root_cause_line_no,
    case when v.failure_class = 'hang' then x.hang_text when v.failure_class = 'interrupted' then coalesce(x.held_text, c.stop_message)
         when v.failure_class = 'nan_divergence' and c.cause_class is null then c.nan_line_text
         when v.failure_class not in ('completed', 'no_outcome') then c.root_cause_text end as root_cause_text,
    case when v.failure_class = 'hang' then (case x.hang_evidence
        when 'debugger' then 'paused at a Ray debugger breakpoint, waiting for a debugger to attach'
        when 'scheduler' then format('the scheduler ended it after a stall: CPU efficiency {}%', x.cpu_pct)
        when 'engine_stall' then format('the rollout engine stalled: {} shared-memory broadcast warnings ({} min with '
                                        'no progress) {}, until the log ends', x.notice_n,
                                        round(x.notice_waited_s / 60, 1), x.when_text)
        when 'unschedulable' then format('Ray could not schedule a resource request: {} "cannot be scheduled" '
                                         'warnings{} {}, until the log ends', x.notice_n,
                                         coalesce(format(' over {} min', round(x.notice_waited_s / 60, 1)), ''), x.when_text)
        when 'service_retry' then format('a remote service kept failing (refused or answered an error) {} times{} '
                                         '{}, retried until the log ends', x.notice_n,
                                         coalesce(format(' over {} min', round(x.notice_waited_s / 60, 1)), ''), x.when_text)
        when 'bar' then format('no progress for {} min: the Training Progress bar stayed at {} (its own elapsed time)',
                               round(x.stalled_s / 60, 1), x.bar_n)
        else format('no progress for {} min after step {}: the log kept printing (its own timestamps) with no new step',
                    round(x.stalled_s / 60, 1), p.last_step)
    end) || case when x.disk_full then '; Ray''s session disk is over 95% full' else '' end end as hang_reason,
    case when v.failure_class = 'hang' then x.hang_duration_s end as hang_duration_s,
    -- a run whose losses went NaN keeps how it was then stopped
    case when v.failure_class in ('interrupted', 'nan_divergence') then
         case when x.held then 'debugger' else c.stop_reason end end as stop_reason,
    t.training_outcome,
    t.training_outcome_step,
    case when v.failure_class not in ('completed', 'hang', 'no_outcome', 'interrupted')
         then c.root_cause_event end as root_cause_event,
    -- what the root-cause line says beyond its class (pipeline/vocabulary.py FAILURE_DETAILS): the device whose
    -- memory ran out, a rendezvous that failed rather than a collective the NCCL watchdog timed out
    case
        when v.failure_class = 'cuda_oom' then case
            when regexp_matches(c.root_cause_text, 'TPU|memory space hbm') then 'tpu_hbm_oom'
            when regexp_matches(c.root_cause_text, 'NPU|npu|Ascend') then 'npu_oom'
            when regexp_matches(c.root_cause_text, 'CUDA|cuda|GPU') or c.root_cause_event = 'cuda_oom'
                then 'cuda_oom'
            else 'device_oom' end
        when v.failure_class = 'nccl_timeout' then
            case when c.root_cause_event = 'distributed_init_error' then 'rendezvous' else 'nccl_watchdog' end
    end as failure_detail,
    case
        when v.failure_class = 'completed' then null
        -- before the first training step began, a run was starting up (or validating, if a traceback says so)
        when not coalesce(p.began, false) and c.driver_phase is null then coalesce(x.tail_early_phase, 'startup')
        when v.failure_class in ('hang', 'interrupted', 'no_outcome') then coalesce(
            x.tail_phase,
            -- a stalled run that printed no sign of work: fit() starts every step by generating
            case when v.failure_class = 'hang' then 'gen' end)
        -- the innermost verl call of the driver's traceback, else the timers printed so far in the step
        else coalesce(c.driver_phase, c.root_cause_phase, x.tail_phase)
    end as failure_phase,
    ll.file as last_line_file,
    ll.line_no as last_line_no,
    ll.text as last_line_text,
    t.bottleneck_phase,
    t.median_step_s,
    t.n_steps as n_timed_steps,
    t.share_gen,
    t.share_reward,
    t.share_old_log_prob,
    t.share_ref,
    t.share_values,
    t.share_adv,
    t.share_update_critic,
    t.share_update_actor,
    t.share_update_weights,
    t.share_other,
    -- a log may carry timestamps only around start-up, so the time is at least the time in steps
    tu.wall_time_s,
    case when tu.wall_time_s > 0 then least(tu.kept_s / tu.wall_time_s, 1) end as goodput,
    -- the run's time that no checkpoint kept, on every GPU it held (a completed run or one still going lost
    -- none, but the steps after a training collapse that had not recovered); null where the log says neither its
    -- time nor its GPUs
    case when v.failure_class in ('completed', 'no_outcome') and t.training_outcome is null then 0
         else greatest(tu.wall_time_s - coalesce(tu.kept_s, 0), 0) * r.n_gpus_per_node * coalesce(r.nnodes, 1) / 3600
    end as gpu_hours_lost,
    tu.last_checkpoint_step,
    tu.steps_lost,
    greatest(coalesce(r.n_segments, 1) - 1 - coalesce(p.new_run_segment, 0), 0) as resume_count,
    -- runs that completed earlier in the same log (a new launch after a final validation), and the line in the
    -- driver log where the run this summary is about printed its first step
    p.earlier_runs,
    p.run_first_line_no,
    -- a divergence's first cause in time: the first step line of the non-finite stretch that ended the run
    case when v.failure_class = 'nan_divergence' then c.onset_step end as onset_step,
    case when v.failure_class = 'nan_divergence' then c.onset_file end as onset_file,
    case when v.failure_class = 'nan_divergence' then c.onset_line_no end as onset_line_no,
    case when v.failure_class = 'nan_divergence' then c.onset_text end as onset_text,
    case when v.failure_class = 'nan_divergence' then c.onset_keys end as onset_keys,
    r.n_metric_values::double / nullif(r.n_metric_values + r.n_parse_failures, 0) as parse_completeness,
    -- a step of this analysis that failed on this run alone (pipeline/isolation.py)
    nullif(array_to_string(list_filter(r.problems, lambda p: starts_with(p, $not_analysed)), '; '), '')
        as analysis_error,
    -- the run's first clock: in a log that holds several runs, the last run's own
    r.* exclude (run_id) replace (coalesce(p.run_started_at, r.first_ts) as first_ts)
from runs as r
left join run_progress as p using (run_id)
left join run_step_time as t using (run_id)
left join run_cause as c using (run_id)
left join run_stall as x using (run_id)
left join verdict as v using (run_id)
left join time_use as tu using (run_id)
left join last_line as ll using (run_id)
order by r.run_id
