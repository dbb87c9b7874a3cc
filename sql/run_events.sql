-- Every error and warning line of a run, classified.
-- The classification is data (shape_class): the first pattern that matches the line wins.
-- Lines are matched with their numbers blanked to 0, so a pattern must not depend on digit values.
with lines as (
    select
        * exclude (text),
        -- the Ray prefix is already in `component` (ingest reads it behind a container runtime's stamp, `kubectl
        -- logs --timestamps`); match on the message itself, indentation kept. Patterns are constants: one built
        -- per row is compiled for every row
        regexp_replace(text, '^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) )?(?:\([^)]*\) ?)?', '')
            as body,
        -- the phase an error or warning line, or a line with a hint, sets for the lines after it in its step
        case when kind in ('error', 'warning') or phase_hint is not null then case
            -- validation's notice names `recompute_log_prob`, a setting
            when contains(text, 'test_gen_batch meta info') then 'testing'
            -- a piece of a hard-wrapped step line names timers (`timing_s/update_actor:31.0`), not work
            when regexp_matches(text, '[\w/@.-]+:\S+ - [\w/@.-]+:\S+') then null
            else phase_hint end end as step_hint
    from (
        select
            run_id, file, line_no, kind, component, pid, segment, step, phase_hint, ts, text,
            -- an event: an error or warning line, or one of the lines that do not read like errors: fatal
            -- signals, scheduler stops, Ray's dead-worker notice, Hydra's refusals, device allocators' failures.
            -- A regex over every line of a big log costs seconds: one alternation of literals that every LIKE
            -- below implies first (one pass over a line, where each LIKE is another), then the LIKEs and the
            -- regex on the few lines it keeps
            case when kind in ('error', 'warning') then true
                 when regexp_matches(text, 'SIG|CANCELLED AT|A worker died or was killed|Terminated|State: |Fatal Python error'
                                           '|terminate called after throwing|PBS: job killed|RUNLIMIT|Could not |is not in struct'
                                           '|Missing mandatory value|LexerNoViableAlt|mismatched input|out of memory|oom-kill'
                                           '|out-of-memory handler')
                 then (text like '%*** SIG%' or text like '%CANCELLED AT%' or text like '%A worker died or was killed%'
                       or text like '%Terminated%' or text like '%State: %' or text like '%Fatal Python error%'
                       or text like '%terminate called after throwing%' or text like '%Signals.SIG%'
                       or text like '%PBS: job killed%' or text like '%TERM_RUNLIMIT%' or text like '%Could not %override%'
                       or text like '%Could not append%' or text like '%is not in struct%' or text like '%Missing mandatory value%'
                       or text like '%LexerNoViableAlt%' or text like '%mismatched input%' or text like '%out of memory%'
                       or text like '%oom-kill%' or text like '%out-of-memory handler%')
                      and regexp_matches(text, '\*\*\* SIG|CANCELLED AT|A worker died or was killed|^Terminated\s*$|: line \d+: +\d+ Terminated\b'
                                         '|State: (TIMEOUT|CANCELLED|OUT_OF_MEMORY)|oom-kill|out-of-memory handler|Fatal Python error|terminate called after throwing|Signals\.SIG'
                                         '|PBS: job killed|TERM_RUNLIMIT|Could not override ''|Could not append to config'
                                         '|is not in struct|Missing mandatory value|LexerNoViableAlt|mismatched input'
                                         -- an allocator's own message: `cuda error: out of memory at ...cumem_allocator.cpp`
                                         '|(?i:(cuda|curesult) error:? .*out of memory)')
                 else false end as event_line
        from log_lines
    )
    where event_line or phase_hint is not null or ts is not null
),
ordered as (
    select
        *,
        -- a time for every line that never runs backwards within a file, to order lines across files
        max(ts) over (partition by run_id, file order by line_no rows between unbounded preceding and current row)
            as order_ts,
        -- the phase an error or warning line interrupted: its own hint, else the latest hint earlier in the same step
        case when kind in ('error', 'warning') or phase_hint is not null then last_value(step_hint ignore nulls) over (
            partition by run_id, file, segment, step order by line_no rows between unbounded preceding and current row)
        end as phase
    from lines
),
blocks as (
    -- traceback blocks per file and process: a block starts at its `Traceback` header
    select
        *,
        -- a running sum over rows (a line number is unique in its file): `count(*) filter` over the
        -- default range frame took seconds on a big log's 250k error lines
        sum(contains(body, 'Traceback (most recent call last)')::integer) over (
            partition by run_id, file, pid order by line_no rows between unbounded preceding and current row
        )::bigint as block,
        -- Python announces an exception it ignored (in a finaliser, an atexit callback) before its traceback
        contains(body, 'Traceback (most recent call last)') and starts_with(lag(body) over (
            partition by run_id, file, pid order by line_no), 'Exception ignored in') as ignored_header
    from ordered
    -- a line kept only for its clock (order_ts) is no part of a traceback: the block windows skip it (most of a
    -- big log's kept lines: 310k of 510k on a 300 MB log)
    where event_line or phase_hint is not null
),
engine_blocks as (
    select
        *,
        -- the innermost verl call a traceback's frames name (an exception's own message may say
        -- "validation" and mean something else): that is the phase the run died in
        -- "validation" or "testing" in a frame's source (a message being raised, a config check) is no call
        -- of verl's validation: of those words only `_validate` itself counts
        last_value(case when regexp_matches(body, '^[\s|]*File "|^\s{4,}\S') then coalesce(
            case when phase_hint = 'testing' and not regexp_matches(body, '\b_validate\b') then null else phase_hint end,
            -- the advantage's estimators (`compute_advantage`, `compute_grpo_outcome_advantage`) name no worker call;
            -- Search-R1's rollout loop (`run_llm_loop`, its retriever calls) is generation
            case when regexp_matches(body, 'compute_\w*advantage') then 'adv'
                 when contains(body, 'run_llm_loop') then 'gen' end) end ignore nulls) over (
            partition by run_id, file, pid, block order by line_no
            rows between unbounded preceding and current row) as block_phase,
        bool_or(ignored_header) over (
            partition by run_id, file, pid, block order by line_no
            rows between unbounded preceding and current row) as ignored,
        bool_or(phase_hint = 'ref' or contains(body, 'ref_policy')) over (
            partition by run_id, file, pid, block order by line_no
            rows between unbounded preceding and current row) as in_ref,
        -- a frame of the trainer's `_validate`: whatever it called (generation, the reward function) was validation
        bool_or(suffix(rtrim(body), ' in _validate') and contains(body, 'File "')) over (
            partition by run_id, file, pid, block order by line_no
            rows between unbounded preceding and current row) as in_validate,
        -- the block's frames run inside the rollout engine's own package: its errors are engine errors
        bool_or(regexp_matches(body, 'File "[^"]*/(vllm|sglang)/|Scheduler hit an exception|EngineCore encountered'))
            over (partition by run_id, file, pid, block order by line_no
                  rows between unbounded preceding and current row) as in_engine
    from blocks
),
events as materialized (
    -- materialized: the shapes and the final select both read it (inlined, each blanked every line's numbers)
    select *, case when in_validate then 'testing' when block_phase = 'old_log_prob' and in_ref then 'ref'
                   else block_phase end as traceback_phase,
           regexp_replace(body, '[0-9]+', '0', 'g') as shape
    from engine_blocks
    where event_line
),
shape_class as (
    -- one row per line shape (numbers blanked): match the few shapes, not the many lines. The patterns are
    -- constants, in priority order: a pattern read from a table is compiled for every shape it meets
    select shape, case
        -- wrappers and chain furniture first, so a wrapper that names its cause is not taken for it
        when regexp_matches(shape, 'Error executing job with overrides|HYDRA_FULL_ERROR') then 'hydra_wrapper'
        when regexp_matches(shape, 'Unhandled error \(suppress with') then 'unhandled_ray_error'
        when regexp_matches(shape, 'RayTaskError') then 'ray_task_error'
        -- Python 3.11's exception groups (an agent loop's task group): their `| `-indented sub-exceptions are the cause
        when regexp_matches(shape, '^[\s|+-]*(Base)?ExceptionGroup\b|Exception Group Traceback') then 'exception_group'
        when regexp_matches(shape, '^[\s|]*Traceback \(most recent call last\)') then 'traceback'
        when regexp_matches(shape, '^[\s|]*File "[^"]*", line \d+') then 'traceback_frame'
        when regexp_matches(shape, 'During handling of the above exception|The above exception was the direct cause') then 'chained_exception'
        -- source lines and carets under a frame, and the tab-indented details of a Ray error
        when regexp_matches(shape, '^\s{4,}[^\s|]|^[\s|]{4,}\s{4}\S|^\s*\^+\s*$|^\t') then 'traceback_code'
        -- c10's C++ backtrace header under the error it belongs to (`Exception raised from throwTimeoutError at
        -- .../c10d/socket.cpp:1021`): where the error was thrown, not another error
        when regexp_matches(shape, '^Exception raised from \w+ at \S+ \(most recent call first\)') then 'cpp_backtrace'
        -- specific causes
        when regexp_matches(shape, 'ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory|Workers \(tasks / actors\) killed|killed due to memory pressure|Out of memory: Kill(ed)? process|oom-kill|Memory cgroup out of memory'
                                   -- SLURM's cgroup: `Detected 1 oom-kill event(s)`, `State: OUT_OF_MEMORY`
                                   '|cgroup out-of-memory handler|State: OUT_OF_MEMORY') then 'host_oom_killed'
        when regexp_matches(shape, '(CUDA|HIP|NPU|XPU) out of memory|OutOfMemoryError: CUDA|[Cc][Uu][Dd][Aa] [Ee]rror: out of memory|CUresult error: \d+ \(out of memory\)|torch(\.cuda)?\.OutOfMemoryError'
                                   '|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation') then 'cuda_oom'
        -- XLA's RESOURCE_EXHAUSTED names memory; gRPC's (a Ray message over its size limit) does not
        when regexp_matches(shape, 'Ran out of memory in memory space hbm|RESOURCE_EXHAUSTED.*([Mm]emory|allocat)|HBM OOM') then 'device_oom'
        when regexp_matches(shape, 'Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|NCCL.{0,40}time(d)? ?out|taking the entire process down') then 'nccl_timeout'
        when regexp_matches(shape, 'NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|DistBackendError|ProcessGroupNCCL') then 'nccl_error'
        -- torch.distributed's rendezvous failing: the processes never met (a communication failure)
        -- torch's own C++ log lines of it (glog: `[E1120 21:53:06.1 socket.cpp:1019] [c10d] ...`, also logged for a
        -- connect it retries): the same failure as the exception Python raises from it, named less precisely
        when regexp_matches(shape, '^(\[rank\d+\]:)?\[[EWF]\d+ [\d:.]+ \w+\.cpp:\d+\] \[c\d+d\]') then 'distributed_init_log'
        when regexp_matches(shape, 'TCPStore|\[c\d+d\]|[Rr]endezvous|DistNetworkError|DistStoreError|invalid nonce|nonce == returnedNonce') then 'distributed_init_error'
        -- raylet's notice that a worker process is gone: the driver's ActorDiedError says which task it took
        -- Ray's system error wrapping an import a worker could not do (unpickling what the driver sent)
        when regexp_matches(shape, 'RaySystemError: System error: .*(No module named|cannot import name)') then 'import_error'
        when regexp_matches(shape, 'A worker died or was killed|Worker exit type: SYSTEM_ERROR') then 'worker_died'
        when regexp_matches(shape, 'ActorDiedError|RayActorError|WorkerCrashedError|The (actor|worker) died unexpectedly|The actor is dead because|actor died') then 'actor_died'
        when regexp_matches(shape, 'ActorUnavailableError|RaySystemError|ObjectLostError|OwnerDiedError') then 'actor_unavailable'
        when regexp_matches(shape, 'Scheduler hit an exception|EngineCore failed to start|Engine core initialization failed|EngineCore encountered') then 'engine_traceback'
        when regexp_matches(shape, 'EngineDeadError|No available memory for the cache blocks|maximum number of tokens that can be stored in KV cache|Not enough memory\. Please try to increase --mem-fraction-static|run_headless failed|Error aborting requests|should be less than or equal to max_position_embeddings|AsyncEngineDeadError|vllm\.[\w.]*Error|sglang\.[\w.]*Error') then 'vllm_engine_error'
        when regexp_matches(shape, 'an illegal memory access was encountered|CUDA error: device-side assert|CUBLAS_STATUS|cudaErrorLaunchFailure') then 'illegal_memory_access'
        when regexp_matches(shape, 'grad_norm is not finite|[Ll]oss (is|became) (nan|NaN|inf)|\b(NaN|nan|inf) (loss|detected)|contains (NaN|nan|inf)|probability tensor contains either|non-finite|FloatingPointError') then 'nan'
        when regexp_matches(shape, 'No space left on device|Disk quota exceeded') then 'disk_full'
        when regexp_matches(shape, 'is over \d+% full') then 'disk_pressure'
        -- stopped on purpose or by a scheduler (the class names the stop_reason)
        when regexp_matches(shape, 'KeyboardInterrupt|[Rr]eceived SIGINT|\(SIGINT\)|Signals\.SIGINT') then 'keyboard_interrupt'
        -- SLURM, PBS's walltime, LSF's run limit
        when regexp_matches(shape, 'DUE TO TIME LIMIT|State: TIMEOUT|[Tt]ime limit (reached|exceeded)|PBS: job killed: walltime|TERM_RUNLIMIT') then 'time_limit'
        when regexp_matches(shape, 'CANCELLED AT|DUE TO PREEMPTION|DUE TO JOB REQUEUE|DUE TO NODE FAILURE|State: CANCELLED|[Kk]illed by (the )?scheduler|[Ee]victed') then 'cancelled'
        -- torch elastic's SignalException: run_summary tells SIGINT (2) from SIGTERM (15) by the original text
        when regexp_matches(shape, 'SIGTERM received|[Rr]eceived SIGTERM|Signals\.SIGTERM|got signal: \d|^Terminated\s*$|: line \d+: +\d+ Terminated\b|\(SIGTERM\)') then 'sigterm'
        when regexp_matches(shape, 'SIGKILL|SIGSEGV|SIGABRT|SIGBUS|Segmentation fault|Fatal Python error|[Kk]illed by signal|terminate called after throwing') then 'killed_by_signal'
        when regexp_matches(shape, 'GetTimeoutError|TimeoutError|DeadlineExceeded|timed out|[Tt]imeout expired') then 'timeout'
        when regexp_matches(shape, '(ModuleNotFoundError|ImportError)\b|undefined symbol') then 'import_error'
        -- Hydra refusing the command line's overrides: a config error, printed without a Python exception
        when regexp_matches(shape, 'Could not override ''|Key ''[^'']*'' is not in struct|Error merging override|Could not append to config'
                                   '|Missing mandatory value|LexerNoViableAltException|mismatched input ''.*'' expecting') then 'config_error'
        when regexp_matches(shape, '^[\s|]*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)(?:\([\w.]*\))?(?::|\s*$)') then 'python_exception'
        -- known noise
        when regexp_matches(shape, 'metrics exporter agent|Failed to establish connection to the metrics exporter') then 'ray_metrics_exporter'
        when regexp_matches(shape, 'is preempted by PreemptionMode') then 'kv_cache_preemption'
        when regexp_matches(shape, 'UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning|ResourceWarning') then 'python_warning'
    end as event_class
    from (select distinct shape from events)
)
select
    e.run_id, e.file, e.line_no,
    case
        -- the raylet's summary counts both: with no worker killed for memory it reports crashes only (the
        -- patterns see numbers blanked, so the count is read here)
        when c.event_class = 'host_oom_killed' and regexp_matches(e.body, '(^|\D)0 Workers \(tasks / actors\) killed')
            then 'worker_died'
        -- a rendezvous failure inside the engine's start-up stays a communication failure
        when e.in_engine and e.block > 0 and c.event_class in ('python_exception', 'nccl_error',
            'illegal_memory_access', 'timeout') then 'vllm_engine_error'
        when c.event_class = 'python_exception' then 'python_exception:' || regexp_extract(
            e.body, '^[\s|]*(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit))', 1)
        when c.event_class = 'ray_task_error' and regexp_matches(e.body, 'RayTaskError\((\w+)\)')
            then 'ray_task_error:' || regexp_extract(e.body, 'RayTaskError\((\w+)\)', 1)
        else coalesce(c.event_class, e.kind || '_other')
    end as event_class,
    -- a stop is what ended the run even when it is logged as a warning (torch elastic's death-signal notice);
    -- an exception Python ignored ended nothing
    case when e.ignored then 'warning'
         when e.kind in ('error', 'warning') and coalesce(c.event_class, '') not in (
             'keyboard_interrupt', 'time_limit', 'cancelled', 'sigterm') then e.kind else 'error' end as kind,
    e.component,
    e.body as message,
    e.step,
    case
        -- preemption is vLLM making room in the KV cache: it happens while generating
        when c.event_class = 'kv_cache_preemption' then coalesce(e.phase, 'gen')
        when e.block > 0 and e.kind = 'error' then coalesce(e.traceback_phase, e.phase)
        else e.phase
    end as phase,
    case when e.block > 0 and e.kind = 'error' then e.traceback_phase end as traceback_phase,
    e.segment,
    e.ts,
    e.order_ts
from events as e
left join shape_class as c using (shape)
order by e.run_id, e.file, e.line_no
