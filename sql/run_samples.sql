-- The sampled generations a run's log prints (verl's reward manager: `[prompt]`, `[response]`,
-- `[ground_truth]`, `[score]` and any extra reward keys such as `[acc]`, `[pred]`), a few per step range:
-- the best and the worst score of each range and every sample showing a cue a reviewer looks for
-- (repetition, a response cut at the length limit, an empty answer, reward without the right answer,
-- the right answer without reward). One row per picked sample.
--
with params as (
    select
        400 as max_field_lines,          -- a field never printed its end: keep this many lines of it
        6 as step_ranges,                -- the run's sampled steps cut into this many equal ranges
        3 as max_cued_per_range,         -- samples kept for their cues in one range (besides best, worst)
        3 as min_repeats,                -- a line repeated this often (or a text of few distinct words)...
        12 as min_repeat_line_chars,     -- ...counts when the line has this many characters
        40 as min_words_for_repetition,
        0.2 as distinct_word_ratio,
        4.0 as chars_per_token,          -- responses this long are at the length limit whatever the tokenizer
        40 as max_answer_chars           -- a ground truth short enough to look for in the response
),
candidate as (
    -- the lines that open a field; cheap substring tests first (a tag's `] `, and the tag opening the line or
    -- following the Ray prefix), the pattern only on what passes
    select run_id, file, line_no, pid, kind, text
    from log_lines
    where contains(text, '] ') and (starts_with(text, '[') or contains(text, ') ['))
      and regexp_matches(text, '(^|\) )\[(prompt|response|ground_truth|score|acc|pred)\] ')
),
tagged as (
    select
        run_id, file, line_no, pid,
        regexp_extract(text, '\[(prompt|response|ground_truth|score|acc|pred)\] ', 1) as field,
        regexp_extract(text, '\[(?:prompt|response|ground_truth|score|acc|pred)\] (.*)$', 1) as first_text
    from candidate
),
fields as materialized (
    -- a field runs to the next field of the same process (at most max_field_lines lines);
    -- a sample starts at each [prompt]
    select
        *,
        coalesce(lead(line_no) over w, line_no + p.max_field_lines + 1) as next_line_no,
        sum(case when field = 'prompt' then 1 else 0 end) over (w rows unbounded preceding) as sample_in_process
    from tagged
    cross join params as p
    window w as (partition by run_id, file, pid order by line_no)
),
field_span as (
    -- every line number a multi-line field may take: the continuation lines are then found by an equality
    -- join on the line number (a range join over every line of a long log pairs each with each field)
    select f.run_id, f.file, f.pid, f.sample_in_process, f.field,
           unnest(range(f.line_no + 1, least(f.next_line_no, f.line_no + p.max_field_lines + 1))) as line_no
    from fields as f
    cross join params as p
    where f.field in ('prompt', 'response', 'ground_truth')
),
continued as materialized (
    -- the continuation lines of multi-line fields: same file and process (the Ray prefix's pid; a line
    -- without one has none), not a progress bar, a step line or W&B's own output. Materialized: DuckDB
    -- would push the `wandb: ` test below the join, two regex replacements on every line of the log
    select f.run_id, f.file, f.pid, f.sample_in_process, f.field, l.line_no,
           regexp_replace(regexp_replace(l.text, '^\([^()]*pid=\d+[^()]*\) ?', ''),
                          '\s*\[repeated \d+x across cluster\]$', '') as body
    from field_span as f
    join log_lines as l
      on l.run_id = f.run_id and l.file = f.file and l.line_no = f.line_no and l.pid is not distinct from f.pid
    where l.kind not in ('progress', 'step_metrics')
),
field_text as (
    select run_id, file, pid, sample_in_process, field, min(line_no) as line_no,
           string_agg(body, chr(10) order by line_no) as body
    from (
        select run_id, file, pid, sample_in_process, field, line_no,
               regexp_replace(first_text, '\s*\[repeated \d+x across cluster\]$', '') as body
        from fields
        union all
        select * from continued
        where not starts_with(body, 'wandb: ')
    )
    where sample_in_process > 0
    group by all
),
sample as (
    select
        run_id, file, pid, sample_in_process,
        min(line_no) as line_no,
        max(line_no) as last_field_line_no,
        any_value(body) filter (where field = 'prompt') as prompt,
        rtrim(any_value(body) filter (where field = 'response'), chr(10) || ' ') as response,
        trim(any_value(body) filter (where field = 'ground_truth')) as ground_truth,
        try_cast(trim(any_value(body) filter (where field = 'score')) as double) as score,
        lower(trim(any_value(body) filter (where field = 'acc'))) as acc,
        trim(any_value(body) filter (where field = 'pred')) as pred
    from field_text
    group by all
    having response is not null
),
step_line as (
    select run_id, file, line_no, step
    from log_lines
    where kind = 'step_metrics' and step is not null
),
stepped as (
    -- a sample is printed while its step runs: the step of the first step line after it
    -- (validation before training prints under step 0's line)
    select s.*, coalesce(n.step, (select max(step) + 1 from step_line as a where a.run_id = s.run_id), 0) as step
    from sample as s
    asof left join step_line as n
      on n.run_id = s.run_id and n.file = s.file and n.line_no > s.last_field_line_no
),
limit_len as (
    select run_id, try_cast(coalesce(
        json_extract_string(config_json, '$.data.max_response_length'),
        json_extract_string(config_json, '$.actor_rollout_ref.rollout.response_length')) as bigint) as max_tokens
    from runs
),
measured as (
    select
        s.*,
        regexp_replace(s.response, '(<\|im_end\|>|<\|endoftext\|>|</s>|<\|eot_id\|>|<｜end▁of▁sentence｜>)\s*$', '')
            as answer,
        regexp_matches(s.response, '(<\|im_end\|>|<\|endoftext\|>|</s>|<\|eot_id\|>|<｜end▁of▁sentence｜>)\s*$')
            as has_end_marker,
        length(s.response) as response_chars,
        string_split_regex(trim(s.response), '\s+') as words,
        list_filter(string_split(s.response, chr(10)), lambda x: length(trim(x)) >= p.min_repeat_line_chars)
            as long_lines,
        m.max_tokens,
        -- a reference answer to look for in the response: short and plain (not 'None', not a dict or list
        -- such as countdown's {'target': 98}, which a right answer never contains as such)
        case when s.ground_truth not in ('', 'None') and length(s.ground_truth) <= p.max_answer_chars
                  and not regexp_matches(s.ground_truth, '[{}\[\]]')
             then s.ground_truth end as plain_truth
    from stepped as s
    cross join params as p
    left join limit_len as m using (run_id)
),
cued as (
    select
        m.*,
        list_filter([
            case when length(trim(m.answer)) = 0 then 'empty_answer' end,
            case when len(m.long_lines) - len(list_distinct(m.long_lines)) >= p.min_repeats - 1
                   or (len(m.words) >= p.min_words_for_repetition
                       and len(list_distinct(m.words)) < p.distinct_word_ratio * len(m.words))
                 then 'repetition' end,
            case when (not m.has_end_marker and bool_or(m.has_end_marker) over (partition by m.run_id))
                   or m.response_chars >= p.chars_per_token * m.max_tokens
                 then 'cut_at_max_length' end,
            case when m.score > 0 and (m.acc = 'false' or not contains(m.answer, m.plain_truth))
                 then 'reward_without_answer' end,
            case when m.score <= 0
                   -- stated as the final answer (boxed, after ####, or on an "answer" line), not merely mentioned
                   and regexp_matches(m.answer, '(?i)(boxed\{\s*|####\s*|answer[^\n]{0,40}?[^0-9.])'
                                      || regexp_escape(m.plain_truth) || '([^0-9.]|\.\D|\.$|$)')
                 then 'answer_without_reward' end
        ], lambda x: x is not null) as cues
    from measured as m
    cross join params as p
),
ranged as (
    select
        c.*,
        row_number() over (partition by c.run_id order by c.file, c.line_no) as sample_no,
        count(*) over (partition by c.run_id) as run_samples,
        least(p.step_ranges - 1, floor((c.step - min(c.step) over r) * p.step_ranges
              / (max(c.step) over r - min(c.step) over r + 1)))::integer as step_range
    from cued as c
    cross join params as p
    window r as (partition by c.run_id)
),
ranked as (
    select
        *,
        row_number() over (partition by run_id, step_range order by score desc nulls last, line_no) as best_rank,
        row_number() over (partition by run_id, step_range order by score asc nulls last, line_no desc) as worst_rank,
        min(step) over (partition by run_id, step_range) as range_first_step,
        max(step) over (partition by run_id, step_range) as range_last_step
    from ranged
)
select
    r.run_id, r.sample_no, r.run_samples, r.file, r.line_no, r.step, r.step_range, r.range_first_step,
    r.range_last_step, r.prompt, r.response, r.ground_truth, r.score, r.acc, r.pred, r.response_chars,
    r.max_tokens, r.cues,
    list_filter([
        case when r.best_rank = 1 and r.score is not null then 'best' end,
        case when r.worst_rank = 1 and r.score is not null and r.best_rank > 1 then 'worst' end,
        case when len(r.cues) > 0 then 'cue' end
    ], lambda x: x is not null) as picked_for
from ranked as r
cross join params as p
where (r.best_rank = 1 or r.worst_rank = 1 or len(r.cues) > 0)
qualify row_number() over (partition by r.run_id, r.step_range, len(r.cues) > 0 and r.best_rank > 1
                           and r.worst_rank > 1 order by r.line_no) <= p.max_cued_per_range
     or r.best_rank = 1 or r.worst_rank = 1
order by r.run_id, r.sample_no
