-- One row per run: what its driver log did after its last progress. The phase its last sign of work names, a
-- debugger a person attached, and a stall with its evidence (a waiting debugger, a scheduler's epilogue, notices
-- that time passed, the progress bar's or the lines' clocks), its length, reason and line. run_summary reads it.
-- Bound parameters: $thresholds STRUCT (pipeline/knowledge/derive_thresholds.toml).
with params as (
    select unnest($thresholds)
),
progress_point as (select run_id, progress_line_no as line_no from run_progress),
main_file as (select run_id, file from run_files where is_main),
final_start as (select run_id, final_start_step as step from run_progress where final_start_step is not null),
trained as (select run_id, trained_step as step from run_progress where trained_step is not null),
began as (select run_id from run_progress where began),
bar as (
    select run_id, bar_n as n, bar_stuck_s as stuck_s, bar_last_line_no as last_line_no,
           bar_last_text as last_text, bar_last_elapsed as last_elapsed
    from run_progress where bar_n is not null
),
step_totals as (
    select run_id, median_step_s, longest_step_s from run_step_time
),
stop as (
    select run_id, stop_position as position, stop_line_no as line_no, stop_reason
    from run_cause where stop_position is not null
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
    from log_lines as l
    -- the lines past each run's last progress in its driver log's final segment, looked up in one map of
    -- the runs (a join hashed the lines where its estimates put them on the build side: a 5 M-line run ran
    -- the connection out of memory)
    where l.line_no > coalesce((select map_from_entries(list({
              'k': {'run_id': s.run_id, 'segment': s.final_segment, 'file': mf.file},
              'v': coalesce(pp.line_no, 0)}))
          from run_progress as s
          join main_file as mf using (run_id)
          left join progress_point as pp using (run_id))[{'run_id': l.run_id, 'segment': l.segment, 'file': l.file}],
          l.line_no)
      -- bounds every run shares, checked first
      and l.segment >= (select min(final_segment) from run_progress)
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
    select run_id, idle_cpu_pct as cpu_pct, idle_line_no as line_no, idle_file as file, idle_text as text
    from run_progress where idle_line_no is not null
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
    from run_progress as s
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
    -- a stalled run: how long, the line that shows it, and what its reason says (run_summary words it)
    select
        h.run_id,
        case when h.evidence in ('engine_stall', 'unschedulable', 'service_retry')
             then greatest(h.stalled_s, sn.waited_s) else h.stalled_s end as hang_duration_s,
        h.evidence, h.stalled_s, h.cpu_pct, h.bar_n, h.when_text, sn.n as notice_n, sn.waited_s as notice_waited_s,
        dp.run_id is not null as disk_full,
        case h.evidence when 'debugger' then d.file when 'scheduler' then si.file
                        when 'bar' then mf.file when 'clock' then cs.file else sn.file end as file,
        case h.evidence when 'debugger' then d.line_no when 'scheduler' then si.line_no
                        when 'bar' then b.last_line_no when 'clock' then cs.line_no else sn.line_no end as line_no,
        case h.evidence when 'debugger' then d.text when 'scheduler' then si.text
                        when 'bar' then regexp_replace(b.last_text, '^.*\r', '') when 'clock' then cs.text
                        else sn.text end as text
    from stall as h
    join run_progress as s using (run_id)
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
)
select
    pr.run_id, ta.phase as tail_phase, ta.early_phase as tail_early_phase,
    hd.run_id is not null as held, hd.file as held_file, hd.line_no as held_line_no, hd.text as held_text,
    h.run_id is not null as hung, h.evidence as hang_evidence, h.hang_duration_s, h.stalled_s, h.cpu_pct, h.bar_n,
    h.when_text, h.notice_n, h.notice_waited_s, h.disk_full, h.file as hang_file, h.line_no as hang_line_no,
    h.text as hang_text
from run_progress as pr
left join tail_activity as ta using (run_id)
left join held as hd using (run_id)
left join hang as h using (run_id)
