-- One row per run: what it ran on and with, as its config dump says, else as its log and its metrics show: the
-- device (cuda, tpu, npu; its name in the reports: GPU, TPU, NPU), the rollout engine (vllm, sglang; null where
-- nothing names one), and whether it had a critic and a reference policy. run_advice applies a rule only where the
-- run has what the rule names; the reports count the device's hours under its own name.
with run as (
    -- the config dump parsed once per run, for the few keys read here (a dump may be 30 MB)
    select run_id, failure_phase, c[1] as device, c[2] as rollout_name, c[3] as critic_enable, c[4] as adv_estimator,
           c[5] as use_kl_loss, c[6] as use_kl_in_reward
    from (
        select run_id, failure_phase,
               list_transform(json_extract_string(config_json, ['$.trainer.device',
                                                                '$.actor_rollout_ref.rollout.name',
                                                                '$.critic.enable',
                                                                '$.algorithm.adv_estimator',
                                                                '$.actor_rollout_ref.actor.use_kl_loss',
                                                                '$.algorithm.use_kl_in_reward']),
                              lambda v: lower(v)) as c
        from run_summary
    )
),
seen as (
    -- what the log itself says about the device and the rollout engine, read only for a run whose config dump
    -- does not say both (every line's text of a 300 MB log costs seconds), and only on the lines one pass of
    -- a single regex keeps (no line it drops counts below)
    select
        run_id,
        bool_or(text like '%PJRT_DEVICE%' or text like '%libtpu%' or text like '%torch_xla%') as tpu,
        bool_or(text like '%torch_npu%' or text like '%Ascend%' or text like '%HCCL%') as npu,
        count(*) filter (where text ilike '%sglang%') as sglang_lines,
        count(*) filter (where text ilike '%vllm%') as vllm_lines
    from log_lines
    where run_id in (select run_id from run
                     where device is null or not (rollout_name like 'sglang%' or rollout_name like 'vllm%'))
      and regexp_matches(text, '(?i)sglang|vllm|PJRT_DEVICE|libtpu|torch_xla|torch_npu|Ascend|HCCL')
    group by all
),
logged as (
    -- the roles the run's own metrics and timers show
    select run_id, bool_or(vf_loss is not null) as critic_metrics, bool_or(kl_loss is not null) as ref_metrics
    from step_health
    group by all
),
timed as (
    select run_id, bool_or(update_critic is not null or "values" is not null) as critic_timed,
           bool_or(ref is not null) as ref_timed
    from step_phases
    group by all
),
facts as (
    select
        r.run_id,
        coalesce(r.device, case when s.tpu then 'tpu' when s.npu then 'npu' end, 'cuda') as device,
        coalesce(
            case when r.rollout_name like 'sglang%' then 'sglang' when r.rollout_name like 'vllm%' then 'vllm' end,
            case when s.sglang_lines > s.vllm_lines then 'sglang' when s.vllm_lines > 0 then 'vllm' end) as engine,
        coalesce(
            case r.critic_enable when 'true' then true when 'false' then false end,
            r.adv_estimator = 'gae',
            l.critic_metrics or t.critic_timed or r.failure_phase in ('update_critic', 'values'),
            false) as has_critic,
        coalesce(r.use_kl_loss = 'true', false) or coalesce(r.use_kl_in_reward = 'true', false)
            or coalesce(l.ref_metrics, false) or coalesce(t.ref_timed, false)
            or coalesce(r.failure_phase = 'ref', false) as has_ref
    from run as r
    left join seen as s using (run_id)
    left join logged as l using (run_id)
    left join timed as t using (run_id)
)
select
    run_id, device,
    -- what the reports call one of its devices (a TPU's hours are no GPU-hours)
    case device when 'tpu' then 'TPU' when 'npu' then 'NPU' else 'GPU' end as accelerator,
    engine, has_critic, has_ref
from facts
