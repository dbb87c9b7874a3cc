-- One row per (run, step): the training signals the seed articles watch, under stable column names
-- whatever verl version wrote them, and under their verl names in the map `verl_values`.
--
with key_map(pattern, col, priority) as (
    -- verl key (a LIKE pattern) -> column; a lower priority wins, keys of equal priority are
    -- combined with the column's aggregate (max for memory, mean for validation scores)
    values
        ('critic/score/mean', 'score_mean', 1),
        ('critic/rewards/mean', 'reward_mean', 1),
        ('actor/ppo_kl', 'ppo_kl', 1),
        ('actor/kl_loss', 'kl_loss', 1),
        ('actor/kl_coef', 'kl_coef', 1),
        ('actor/reward_kl_penalty', 'reward_kl', 1), ('critic/kl', 'reward_kl', 2),
        ('actor/reward_kl_penalty_coeff', 'reward_kl_coef', 1), ('critic/kl_coeff', 'reward_kl_coef', 2),
        ('actor/entropy', 'entropy', 1), ('actor/entropy_loss', 'entropy', 2),
        ('actor/pg_loss', 'pg_loss', 1),
        ('actor/pg_clipfrac', 'pg_clipfrac', 1),
        ('actor/pg_clipfrac_lower', 'pg_clipfrac_lower', 1),
        ('actor/grad_norm', 'grad_norm', 1),
        ('actor/lr', 'lr', 1),
        ('critic/vf_loss', 'vf_loss', 1),
        ('critic/vf_clipfrac', 'vf_clipfrac', 1),
        ('critic/grad_norm', 'critic_grad_norm', 1),
        ('response_length/mean', 'response_length_mean', 1),
        ('response_length/max', 'response_length_max', 1),
        ('response_length/clip_ratio', 'response_clip_ratio', 1),
        ('response/aborted_ratio', 'response_aborted_ratio', 1),
        ('prompt_length/mean', 'prompt_length_mean', 1),
        ('perf/max_memory_allocated_gb', 'mem_allocated_gb', 1), ('memory/%alloc%', 'mem_allocated_gb', 2),
        ('perf/max_memory_reserved_gb', 'mem_reserved_gb', 1), ('memory/%reserv%', 'mem_reserved_gb', 2),
        ('memory/%total%', 'mem_total_gb', 1),
        ('memory/%used%', 'mem_used_gb', 1),
        ('perf/cpu_memory_used_gb', 'cpu_memory_used_gb', 1),
        ('val-core/%mean@%', 'val_core_mean', 1), ('val/test_score/%', 'val_core_mean', 2),
        ('training/epoch', 'epoch', 1)
),
metrics as (
    -- the log's last launch (run_launches); the file logger's JSONL rows carry segment -1
    select m.run_id, m.step, m.key, m.value, m.segment
    from step_metrics as m
    left join run_launches as la using (run_id)
    where m.segment < 0 or m.segment >= la.launch_segment or m.file is distinct from la.launch_file
),
resolved as (
    -- match the few distinct keys against the patterns, then join the many values by equality
    select k.key, m.col, m.priority
    from (select distinct key from metrics) as k
    join key_map as m on k.key like m.pattern
),
per_priority as (
    select
        m.run_id, m.step, r.col, r.priority, avg(m.value) as mean_value, max(m.value) as max_value
    from metrics as m
    join resolved as r using (key)
    group by all
),
verl_named as (
    -- the same signals under their verl names, as this run's verl version logged them
    select m.run_id, m.step, map_from_entries(list({'k': m.key, 'v': m.value} order by m.key)) as verl_values
    from metrics as m
    join (select distinct key from resolved) using (key)
    group by all
),
picked as (
    select
        run_id, step, col,
        arg_min(case when col = 'val_core_mean' then mean_value else max_value end, priority) as value
    from per_priority
    group by all
),
wide as (
    select
        run_id, step,
        max(value) filter (where col = 'score_mean') as score_mean,
        max(value) filter (where col = 'reward_mean') as reward_mean,
        max(value) filter (where col = 'ppo_kl') as ppo_kl,
        max(value) filter (where col = 'kl_loss') as kl_loss,
        max(value) filter (where col = 'kl_coef') as kl_coef,
        max(value) filter (where col = 'reward_kl') as reward_kl,
        max(value) filter (where col = 'reward_kl_coef') as reward_kl_coef,
        max(value) filter (where col = 'entropy') as entropy,
        max(value) filter (where col = 'pg_loss') as pg_loss,
        max(value) filter (where col = 'pg_clipfrac') as pg_clipfrac,
        max(value) filter (where col = 'pg_clipfrac_lower') as pg_clipfrac_lower,
        max(value) filter (where col = 'grad_norm') as grad_norm,
        max(value) filter (where col = 'lr') as lr,
        max(value) filter (where col = 'vf_loss') as vf_loss,
        max(value) filter (where col = 'vf_clipfrac') as vf_clipfrac,
        max(value) filter (where col = 'critic_grad_norm') as critic_grad_norm,
        max(value) filter (where col = 'response_length_mean') as response_length_mean,
        max(value) filter (where col = 'response_length_max') as response_length_max,
        max(value) filter (where col = 'response_clip_ratio') as response_clip_ratio,
        max(value) filter (where col = 'response_aborted_ratio') as response_aborted_ratio,
        max(value) filter (where col = 'prompt_length_mean') as prompt_length_mean,
        max(value) filter (where col = 'mem_allocated_gb') as mem_allocated_gb,
        max(value) filter (where col = 'mem_reserved_gb') as mem_reserved_gb,
        max(value) filter (where col = 'mem_total_gb') as mem_total_gb,
        max(value) filter (where col = 'mem_used_gb') as mem_used_gb,
        max(value) filter (where col = 'cpu_memory_used_gb') as cpu_memory_used_gb,
        max(value) filter (where col = 'val_core_mean') as val_core_mean,
        max(value) filter (where col = 'epoch') as epoch
    from picked
    group by all
),
steps as (
    select
        run_id, step,
        max(segment) as segment,
        count(*) as n_metrics,
        -- not isfinite(): DuckDB folds isnan() to false when Parquet statistics (which skip NaN) say none
        bool_or(not isfinite(value)) as has_nan,
        list(key order by key) filter (where not isfinite(value)) as nan_keys
    from metrics
    group by all
)
select
    s.run_id, s.step, s.segment, s.n_metrics,
    w.* exclude (run_id, step),
    -- reserved memory is what the allocator holds on the device, so it is the pressure measure
    coalesce(w.mem_reserved_gb, w.mem_allocated_gb, w.mem_used_gb) / nullif(w.mem_total_gb, 0) as mem_fraction,
    s.has_nan,
    s.nan_keys,
    v.verl_values
from steps as s
left join wide as w using (run_id, step)
left join verl_named as v using (run_id, step)
order by s.run_id, s.step
