-- Configuration problems the seed articles check by hand, one row per finding with its evidence line.
-- Bound parameters: $thresholds STRUCT (pipeline/knowledge/derive_thresholds.toml).
with params as (
    select unnest($thresholds)
),
run as (
    select *, coalesce(n_gpus_per_node, 1) * coalesce(nnodes, 1) as n_gpus
    from runs
),
picked as materialized (
    -- every line the checks below read by its text (config lines, memory lines, what the rollout engine
    -- printed of its settings), in one scan of the text: each scan of a 300 MB log's text costs ~0.5 s
    select run_id, file, line_no, kind, pid, step, text
    from log_lines
    where case kind when 'config' then true when 'memory' then contains(text, 'memory allocated (GB)')
                    else contains(text, 'tensor_parallel_size') or contains(text, 'kwargs: {') end
),
config_line as (
    -- first config line naming a setting, as evidence for findings about that setting
    -- ties (a line number in two files) broken by the file name: file, line and text of one line
    select run_id, setting, arg_min(file, (line_no, file)) as file, min(line_no) as line_no,
           arg_min(text, (line_no, file)) as text
    from picked
    cross join (values ('gpu_memory_utilization'), ('ppo_mini_batch_size'), ('tensor_model_parallel_size'),
                       ('train_batch_size'), ('ppo_micro_batch_size_per_gpu'), ('grad_clip'), ('use_kl_loss'),
                       ('clip_ratio'), ('save_freq'))
               as s(setting)
    where kind = 'config' and contains(text, setting)
    group by all
),
memory_lines as (
    select
        run_id, file, line_no, pid, step, text,
        -- the head names the call site ("After building vllm rollout"): drop prefix and log-level stamp
        trim(regexp_replace(split_part(text, ', memory allocated', 1),
                            '^(\([^)]*\))?\s*((DEBUG|INFO|WARNING):[0-9-]+ [0-9:,]+:)?', '')) as head,
        try_cast(regexp_extract(text, 'memory allocated \(GB\): ([0-9.]+)', 1) as double) as allocated_gb,
        try_cast(regexp_extract(text, 'memory reserved \(GB\): ([0-9.]+)', 1) as double) as reserved_gb
    from picked
    where kind = 'memory'
),
memory_spread as (
    -- the same memory-line head at the same step on different workers should show the same memory
    select
        run_id, step, head,
        count(distinct pid) as workers,
        max(allocated_gb) as max_gb, min(allocated_gb) as min_gb,
        -- of the lines with the most memory the first (a tie picked at random made reruns differ)
        arg_max(file, (allocated_gb, -line_no, file)) as file,
        arg_max(line_no, (allocated_gb, -line_no, file)) as line_no,
        arg_max(text, (allocated_gb, -line_no, file)) as text
    from memory_lines
    where pid is not null and allocated_gb is not null
    group by all
),
memory_imbalance as (
    select
        m.run_id, 'memory_imbalance' as finding, 'warning' as severity,
        format('"{}": workers hold {:.2f} to {:.2f} GB allocated at step {} ({} workers); the articles expect '
               'them within {} GB. Rollout data sharding or load balance is off.',
               m.head, m.min_gb, m.max_gb, m.step, m.workers, p.imbalance_gb) as message,
        m.file, m.line_no, m.text,
        row_number() over (partition by m.run_id order by m.max_gb - m.min_gb desc, m.line_no) as rank
    from memory_spread as m
    cross join params as p
    where m.workers > 1
      and m.max_gb - m.min_gb > p.imbalance_gb
      and m.max_gb - m.min_gb > p.imbalance_ratio * m.max_gb
),
logged_rollout as (
    -- what the rollout ran with, where the log prints it: the engine's tensor parallel size (vLLM server args /
    -- engine config; `\b` keeps out Megatron's expert_tensor_parallel_size, which is the trainer's, not the
    -- rollout's), and the `n` of the sampling kwargs the old sync rollout prints
    select
        l.run_id, l.file, l.line_no, l.text,
        try_cast(regexp_extract(l.text, '\btensor_parallel_size[''"]?\s*[,:=]\s*[''"]?(\d+)', 1) as bigint) as tp,
        case when regexp_matches(l.text, 'kwargs: \{.*[''"]n[''"]:\s*\d+')
             then try_cast(regexp_extract(l.text, '[''"]n[''"]:\s*(\d+)', 1) as bigint) end as n
    from picked as l
    where l.kind <> 'config'
),
rollout_mismatch as (
    select
        g.run_id, m.finding, 'warning' as severity, m.message, g.file, g.line_no, g.text,
        row_number() over (partition by g.run_id, m.finding order by g.line_no) as rank
    from logged_rollout as g
    join run as r using (run_id)
    cross join lateral (
        select 'rollout_tp_mismatch' as finding,
               format('Config asks rollout tensor_model_parallel_size={} but the rollout engine started with {}.',
                      r.rollout_tp, g.tp) as message
        where g.tp <> r.rollout_tp
        union all
        -- verl from v0.5 repeats each prompt n times and samples with n=1, so only n > 1 can disagree
        select 'rollout_n_mismatch', format('Config asks rollout n={} but the rollout sampled with n={}.', r.rollout_n, g.n)
        where g.n > 1 and g.n <> r.rollout_n
    ) as m
),
oom_runs as (
    select run_id, min(line_no) as line_no, arg_min(file, (line_no, file)) as file,
           arg_min(message, (line_no, file)) as text
    from run_events
    where event_class = 'cuda_oom'
    group by all
),
gmu_high as (
    select
        r.run_id, 'gpu_memory_utilization_high_with_oom', 'error',
        format('rollout gpu_memory_utilization={} is above the articles'' safe {} and the run hit CUDA OOM; '
               'lower it (and max_num_batched_tokens) to leave room for the trainer.',
               r.gpu_memory_utilization, p.safe_gpu_memory_utilization),
        coalesce(c.file, o.file), coalesce(c.line_no, o.line_no), coalesce(c.text, o.text),
        1 as rank
    from run as r
    cross join params as p
    join oom_runs as o using (run_id)
    left join config_line as c on c.run_id = r.run_id and c.setting = 'gpu_memory_utilization'
    where r.gpu_memory_utilization > p.safe_gpu_memory_utilization
),
config_checked as (
    -- the setting checks (config_checks) with the first config line naming the setting as evidence
    select f.run_id, f.finding, f.severity, f.message, c.file, c.line_no, c.text
    from config_checks as f
    left join config_line as c on c.run_id = f.run_id and c.setting = f.setting
),
step_signals(finding, severity, key, threshold_name, advice) as (
    values
        ('kl_out_of_control', 'warning', 'actor/ppo_kl', 'kl_out_of_control',
         'the articles treat KL above {} as a policy running away: lower the lr or tighten clip_ratio / kl_coef'),
        ('clip_fraction_high', 'warning', 'actor/pg_clipfrac', 'clipfrac_high',
         'a clip fraction above {} means updates are too large for the clip range')
),
thresholds as (
    select * from (unpivot (select kl_out_of_control, clipfrac_high from params) on kl_out_of_control, clipfrac_high
                   into name threshold_name value threshold)
),
signal_hits as (
    select
        m.run_id, s.finding, s.severity,
        format('{} reached {:.4g} at step {} ({} steps above); ' || s.advice || '.',
               m.key, m.value, m.step, count(*) over (partition by m.run_id, s.finding), t.threshold) as message,
        m.file, m.line_no,
        row_number() over (partition by m.run_id, s.finding order by m.value desc, m.step) as rank
    from step_metrics as m
    join step_signals as s on s.key = m.key
    join thresholds as t using (threshold_name)
    -- the log's last launch (run_launches)
    left join run_launches as la using (run_id)
    where isfinite(m.value) and m.value > t.threshold
      and (m.segment < 0 or m.segment >= la.launch_segment or m.file is distinct from la.launch_file)
),
mem_fraction_hits as (
    select
        h.run_id, 'memory_near_capacity' as finding, 'warning' as severity,
        format('Reserved GPU memory reached {}% of the device at step {} ({} steps above {}%); '
               'the articles call that an OOM risk.',
               round(h.mem_fraction * 100, 1), h.step, count(*) over (partition by h.run_id),
               round(p.mem_fraction_oom_risk * 100)) as message,
        row_number() over (partition by h.run_id order by h.mem_fraction desc, h.step) as rank,
        h.step
    from step_health as h
    cross join params as p
    where h.mem_fraction > p.mem_fraction_oom_risk
),
step_line as (
    select distinct run_id, step, file, line_no from step_metrics
    where key in ('timing_s/step', 'training/global_step')
),
warning_findings(event_class, finding, severity, message) as (
    values
        ('disk_pressure', 'disk_nearly_full', 'warning',
         'The node''s disk (Ray session dir) is nearly full: object spilling and checkpoints will fail. Clean /tmp/ray.'),
        ('kv_cache_preemption', 'kv_cache_too_small', 'warning',
         'vLLM preempted sequences for lack of KV-cache space, which slows generation: raise '
         'gpu_memory_utilization or lower max_num_seqs / max_num_batched_tokens.')
),
event_findings as (
    select
        e.run_id, w.finding, w.severity,
        w.message || format(' ({} such lines.)', count(*) over (partition by e.run_id, w.finding)) as message,
        e.file, e.line_no, e.message as text,
        row_number() over (partition by e.run_id, w.finding order by e.line_no, e.file) as rank
    from run_events as e
    join warning_findings as w using (event_class)
),
nothing_saved as (
    -- a run that failed with no checkpoint lost every step it took; save_freq (-1, or beyond the steps it
    -- reached) is why
    select
        s.run_id, 'no_checkpoint_before_failure' as finding, 'warning' as severity,
        format('The run {} at step {} with no checkpoint saved (trainer.save_freq={}): all {} steps are lost. '
               'Save every few dozen steps so a crash costs at most that many.',
               replace(s.failure_class, '_', ' '), s.last_step, coalesce(s.save_freq::varchar, 'not set'),
               s.steps_lost) as message,
        c.file, c.line_no, c.text
    from run_summary as s
    left join (select * from config_line where setting = 'save_freq') as c using (run_id)
    where s.failure_class not in ('completed', 'no_outcome', 'interrupted')
      and s.last_checkpoint_step is null and s.steps_lost > 0
),
all_findings as (
    select run_id, finding, severity, message, file, line_no, text from memory_imbalance where rank = 1
    union all
    select * from nothing_saved
    union all
    select * exclude (rank) from rollout_mismatch where rank = 1
    union all
    select * exclude (rank) from gmu_high
    union all
    select * from config_checked
    union all
    select s.run_id, s.finding, s.severity, s.message, s.file, s.line_no, l.text
    from signal_hits as s
    left join log_lines as l using (run_id, file, line_no)
    where s.rank = 1
    union all
    select h.run_id, h.finding, h.severity, h.message, sl.file, sl.line_no, l.text
    from mem_fraction_hits as h
    left join step_line as sl using (run_id, step)
    left join log_lines as l on l.run_id = sl.run_id and l.file = sl.file and l.line_no = sl.line_no
    where h.rank = 1
    union all
    select * exclude (rank) from event_findings where rank = 1
)
select
    run_id, finding, severity, message,
    file as evidence_file, line_no as evidence_line_no, text as evidence_text
from all_findings
order by run_id, finding
