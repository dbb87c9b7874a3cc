-- One row per run: where its time went. The timers' sums and shares per phase and the bottleneck, the time in steps
-- whose results survive (up to the last checkpoint), the job's running time per resume segment, and the time before
-- a training collapse (run_training). run_stall and run_summary read it.
with final_segment as (select run_id, final_segment as segment from run_progress where final_segment is not null),
final_start as (select run_id, final_start_step as step from run_progress where final_start_step is not null),
new_run as (select run_id, new_run_segment as segment from run_progress where new_run_segment is not null),
steps as (
    select
        p.run_id,
        max(p.step) filter (where p.segment = f.segment) as last_step,
        count(*) as n_steps,
        median(p.step_time) as median_step_s,
        -- the longest a step took, its validation and checkpoint included
        max(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) as longest_step_s,
        -- steps whose results survive: up to the checkpoint the final segment resumed from, then its own
        sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) filter (
            where p.segment = f.segment or p.step <= coalesce(fs.step, 0)) as counted_s,
        sum(p.gen) as gen, sum(p.reward) as reward, sum(p.old_log_prob) as old_log_prob, sum(p.ref) as ref,
        sum(p."values") as "values", sum(p.adv) as adv, sum(p.update_critic) as update_critic,
        sum(p.update_actor) as update_actor, sum(p.update_weights) as update_weights,
        sum(p.other_time) as other_time,
        sum(p.testing) as testing, sum(p.save_checkpoint) as save_checkpoint
    from step_phases as p
    join final_segment as f using (run_id)
    left join final_start as fs using (run_id)
    group by all
),
step_totals as (
    select
        *,
        nullif(coalesce(gen, 0) + coalesce(reward, 0) + coalesce(old_log_prob, 0) + coalesce(ref, 0)
            + coalesce("values", 0) + coalesce(adv, 0) + coalesce(update_critic, 0) + coalesce(update_actor, 0)
            + coalesce(update_weights, 0) + coalesce(other_time, 0), 0) as inside_s
    from steps
),
run_bottleneck as (
    select run_id, arg_max(phase, seconds) as bottleneck_phase
    from (
        unpivot (select run_id, gen, reward, old_log_prob, ref, "values", adv, update_critic, update_actor,
                        update_weights from steps)
        on gen, reward, old_log_prob, ref, "values", adv, update_critic, update_actor, update_weights
        into name phase value seconds
    )
    group by all
),
checkpoint as (
    -- the last step whose checkpoint was written (its timer, or the folder verl prints), counting only
    -- steps whose results the final segment kept
    select run_id, max(step) as step
    from (
        select p.run_id, p.step
        from step_phases as p
        join final_segment as f using (run_id)
        left join final_start as fs using (run_id)
        where p.save_checkpoint is not null and (p.segment = f.segment or p.step <= coalesce(fs.step, 0))
        union all
        select run_id, saved_folder_step from run_progress where saved_folder_step is not null
    )
    group by all
),
kept as (
    -- time in the steps a checkpoint preserved
    select p.run_id, sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0)) as kept_s
    from step_phases as p
    join final_segment as f using (run_id)
    left join final_start as fs using (run_id)
    join checkpoint as c using (run_id)
    where (p.segment = f.segment or p.step <= coalesce(fs.step, 0)) and p.step <= c.step
    group by all
),
running as (
    -- time the job was running: each resume segment's own span, not the days between attempts, nor an
    -- earlier run's in the same log
    select run_id, sum(span_s) as running_s
    from (select l.run_id, l.segment, epoch(max(l.ts) - min(l.ts)) as span_s
          from log_lines as l
          left join new_run as nr using (run_id)
          where l.ts is not null and l.segment >= coalesce(nr.segment, 0)
          group by all)
    group by all
),
training as (
    -- a training collapse or divergence that had not recovered (run_training): the steps from its onset on
    -- produced nothing worth keeping
    select t.run_id, t.training_outcome, t.training_outcome_step,
           sum(coalesce(p.step_time, 0) + coalesce(p.testing, 0) + coalesce(p.save_checkpoint, 0))
               filter (where p.step < t.training_outcome_step) as before_onset_s
    from run_training as t
    join final_segment as f using (run_id)
    left join step_phases as p on p.run_id = t.run_id and p.segment = f.segment
    group by all
)
select
    pr.run_id, st.n_steps, st.median_step_s, st.longest_step_s, st.counted_s, b.bottleneck_phase,
    st.gen / st.inside_s as share_gen,
    st.reward / st.inside_s as share_reward,
    st.old_log_prob / st.inside_s as share_old_log_prob,
    st.ref / st.inside_s as share_ref,
    st."values" / st.inside_s as share_values,
    st.adv / st.inside_s as share_adv,
    st.update_critic / st.inside_s as share_update_critic,
    st.update_actor / st.inside_s as share_update_actor,
    st.update_weights / st.inside_s as share_update_weights,
    st.other_time / st.inside_s as share_other,
    c.step as last_checkpoint_step, k.kept_s as checkpoint_kept_s, ru.running_s,
    tr.run_id is not null as collapsed, tr.training_outcome, tr.training_outcome_step, tr.before_onset_s
from run_progress as pr
left join step_totals as st using (run_id)
left join run_bottleneck as b using (run_id)
left join checkpoint as c using (run_id)
left join kept as k using (run_id)
left join running as ru using (run_id)
left join training as tr using (run_id)
