-- One row per setting check a run's config fails: batch sizes that do not divide each other or the GPUs, a
-- disabled grad clip, a wide PPO clip ratio, no KL regularisation; with the setting it names and the message.
-- config_findings adds each one's evidence line. Bound parameters: $thresholds STRUCT
-- (pipeline/knowledge/derive_thresholds.toml).
with params as (
    select unnest($thresholds)
),
run as (
    select *, coalesce(n_gpus_per_node, 1) * coalesce(nnodes, 1) as n_gpus
    from runs
),
batch_checks(finding, severity, setting) as (
    values
        ('train_batch_not_divisible_by_mini_batch', 'error', 'ppo_mini_batch_size'),
        ('mini_batch_not_divisible_by_gpus', 'warning', 'ppo_mini_batch_size'),
        ('mini_batch_not_divisible_by_micro_batch', 'error', 'ppo_micro_batch_size_per_gpu'),
        ('rollout_tp_does_not_divide_gpus', 'error', 'tensor_model_parallel_size')
),
batch_facts as (
    select
        r.run_id,
        case
            when b.finding = 'train_batch_not_divisible_by_mini_batch'
                 and r.train_batch_size % nullif(r.ppo_mini_batch_size, 0) <> 0
                then format('train_batch_size={} is not a multiple of ppo_mini_batch_size={}: the last mini-batch '
                            'of every step is ragged.', r.train_batch_size, r.ppo_mini_batch_size)
            when b.finding = 'mini_batch_not_divisible_by_gpus'
                 and (r.ppo_mini_batch_size * coalesce(r.rollout_n, 1)) % nullif(r.n_gpus, 0) <> 0
                then format('ppo_mini_batch_size*n = {}*{} = {} samples do not split evenly over {} GPUs.',
                            r.ppo_mini_batch_size, coalesce(r.rollout_n, 1),
                            r.ppo_mini_batch_size * coalesce(r.rollout_n, 1), r.n_gpus)
            when b.finding = 'mini_batch_not_divisible_by_micro_batch'
                 and (r.ppo_mini_batch_size * coalesce(r.rollout_n, 1)) % nullif(r.n_gpus, 0) = 0
                 and ((r.ppo_mini_batch_size * coalesce(r.rollout_n, 1)) // nullif(r.n_gpus, 0))
                     % nullif(r.ppo_micro_batch_size_per_gpu, 0) <> 0
                then format('Per-GPU mini-batch {} (ppo_mini_batch_size*n/GPUs) is not a multiple of '
                            'ppo_micro_batch_size_per_gpu={}.',
                            (r.ppo_mini_batch_size * coalesce(r.rollout_n, 1)) // r.n_gpus,
                            r.ppo_micro_batch_size_per_gpu)
            when b.finding = 'rollout_tp_does_not_divide_gpus'
                 and coalesce(r.n_gpus_per_node, 0) % nullif(r.rollout_tp, 0) <> 0
                then format('rollout tensor_model_parallel_size={} does not divide n_gpus_per_node={}.',
                            r.rollout_tp, r.n_gpus_per_node)
        end as message,
        b.finding, b.severity, b.setting
    from run as r
    cross join batch_checks as b
),
algorithm_settings as (
    select
        r.run_id,
        try_cast(json_extract_string(r.config_json, '$.actor_rollout_ref.actor.grad_clip') as double) as grad_clip,
        try_cast(json_extract_string(r.config_json, '$.actor_rollout_ref.actor.clip_ratio') as double) as clip_ratio,
        try_cast(json_extract_string(r.config_json, '$.actor_rollout_ref.actor.use_kl_loss') as boolean)
            as use_kl_loss,
        try_cast(json_extract_string(r.config_json, '$.algorithm.use_kl_in_reward') as boolean) as use_kl_in_reward
    from run as r
    where r.config_json is not null
),
algorithm_facts as (
    select run_id, 'grad_clip_disabled' as finding, 'warning' as severity, 'grad_clip' as setting,
           format('actor grad_clip is {}: nothing bounds an exploding gradient; the articles require '
                  'grad_clip 1.0.', grad_clip) as message
    from algorithm_settings
    where grad_clip <= 0
    union all
    select a.run_id, 'clip_ratio_wide', 'warning', 'clip_ratio',
           format('PPO clip_ratio={} is wider than the articles'' 0.1-0.2: updates may overshoot.', a.clip_ratio)
    from algorithm_settings as a
    cross join params as p
    where a.clip_ratio > p.clip_ratio_wide
    union all
    select run_id, 'no_kl_regularization', 'info', 'use_kl_loss',
           'Neither the KL loss nor the in-reward KL penalty is on: nothing keeps the policy near the '
           'reference model. Watch actor/ppo_kl (the articles keep KL within 0.01-0.1).'
    from algorithm_settings
    where not use_kl_loss and not coalesce(use_kl_in_reward, false)
)
select run_id, finding, severity, setting, message from batch_facts where message is not null
union all
select run_id, finding, severity, setting, message from algorithm_facts
