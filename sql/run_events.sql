-- Every error and warning line of a run, classified. Bound parameters: $run_ids VARCHAR[].
-- The classification is data: the first pattern (lowest priority) that matches the line wins.
with patterns(priority, event_class, pattern) as (
    values
        -- wrappers and chain furniture first, so a wrapper that names its cause is not taken for it
        (10, 'hydra_wrapper', 'Error executing job with overrides|HYDRA_FULL_ERROR'),
        (11, 'unhandled_ray_error', 'Unhandled error \(suppress with'),
        (12, 'ray_task_error', 'RayTaskError'),
        (13, 'traceback', '^\s*Traceback \(most recent call last\)'),
        (14, 'traceback_frame', '^\s*File "[^"]*", line \d+'),
        (15, 'chained_exception', 'During handling of the above exception|The above exception was the direct cause'),
        -- specific causes
        (20, 'host_oom_killed', 'ray\.exceptions\.OutOfMemoryError|Task was killed due to the node running low on memory|killed due to memory pressure \(OOM\)|Out of memory: Kill(ed)? process|oom-kill|Memory cgroup out of memory'),
        (21, 'cuda_oom', 'CUDA out of memory|OutOfMemoryError: CUDA|cuda error: out of memory|CUresult error: 2 \(out of memory\)|CUDA error: out of memory|torch(\.cuda)?\.OutOfMemoryError'),
        (22, 'device_oom', 'Ran out of memory in memory space hbm|RESOURCE_EXHAUSTED|HBM OOM'),
        (23, 'nccl_timeout', 'Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out|NCCL.{0,40}time(d)? ?out|taking the entire process down'),
        (24, 'nccl_error', 'NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|DistBackendError|ProcessGroupNCCL'),
        (25, 'distributed_init_error', 'TCPStore|c10d|rendezvous|Connection reset by peer|invalid nonce'),
        (30, 'actor_died', 'ActorDiedError|The actor died unexpectedly|The actor is dead because|A worker died or was killed|Worker exit type: SYSTEM_ERROR|actor died'),
        (31, 'actor_unavailable', 'ActorUnavailableError|RaySystemError|ObjectLostError|OwnerDiedError'),
        (35, 'vllm_engine_error', 'EngineDeadError|EngineCore encountered|No available memory for the cache blocks|maximum number of tokens that can be stored in KV cache|Not enough memory\. Please try to increase --mem-fraction-static|run_headless failed|Error aborting requests|Scheduler hit an exception|should be less than or equal to max_position_embeddings|AsyncEngineDeadError|vllm\.[\w.]*Error|sglang\.[\w.]*Error'),
        (36, 'illegal_memory_access', 'an illegal memory access was encountered|CUDA error: device-side assert|CUBLAS_STATUS|cudaErrorLaunchFailure'),
        (40, 'nan', 'grad_norm is not finite|[Ll]oss (is|became) (nan|NaN|inf)|\b(NaN|nan|inf) (loss|detected)|contains (NaN|nan|inf)|non-finite|FloatingPointError'),
        (45, 'disk_full', 'No space left on device|is over \d+% full|Disk quota exceeded'),
        (50, 'keyboard_interrupt', 'KeyboardInterrupt'),
        (51, 'killed_by_signal', 'SIGKILL|SIGSEGV|SIGTERM|SIGABRT|SIGBUS|Segmentation fault|Fatal Python error|[Kk]illed by signal|exit code -?(9|11|15|134|137|139)\b'),
        (55, 'timeout', 'GetTimeoutError|TimeoutError|DeadlineExceeded|timed out|[Tt]imeout expired'),
        (58, 'import_error', '(ModuleNotFoundError|ImportError)\b|undefined symbol|failed to import'),
        (60, 'python_exception', '^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)(?:\([\w.]*\))?(?::|\s*$)'),
        -- known noise
        (70, 'ray_metrics_exporter', 'metrics exporter agent|Failed to establish connection to the metrics exporter'),
        (71, 'kv_cache_preemption', 'is preempted by PreemptionMode'),
        (72, 'python_warning', 'UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning|ResourceWarning')
),
lines as (
    select
        run_id, file, line_no, kind, component, segment, step, phase_hint, ts, text,
        -- the Ray prefix is already in `component`; match on the message itself
        regexp_replace(text, '^\s*\([^)]*\)\s*', '') as body
    from log_lines
    where list_contains($run_ids, run_id) and (kind in ('error', 'warning') or phase_hint is not null)
),
events as (
    select * from lines where kind in ('error', 'warning')
),
classified as (
    select e.run_id, e.file, e.line_no, arg_min(p.event_class, p.priority) as event_class
    from events as e
    join patterns as p on regexp_matches(e.body, p.pattern)
    group by all
),
phased as (
    -- the phase a line interrupted: its own hint, else the latest hint earlier in the same step
    select
        run_id, file, line_no,
        last_value(phase_hint ignore nulls) over (
            partition by run_id, file, segment, step order by line_no
            rows between unbounded preceding and current row
        ) as phase
    from lines
)
select
    e.run_id, e.file, e.line_no,
    case
        when c.event_class = 'python_exception' then 'python_exception:' || regexp_extract(
            e.body, '^\s*(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit))', 1)
        when c.event_class = 'ray_task_error' and regexp_matches(e.body, 'RayTaskError\((\w+)\)')
            then 'ray_task_error:' || regexp_extract(e.body, 'RayTaskError\((\w+)\)', 1)
        else coalesce(c.event_class, e.kind || '_other')
    end as event_class,
    e.kind,
    e.component,
    e.body as message,
    e.step,
    p.phase,
    e.segment,
    e.ts
from events as e
left join classified as c using (run_id, file, line_no)
left join phased as p using (run_id, file, line_no)
order by e.run_id, e.file, e.line_no
