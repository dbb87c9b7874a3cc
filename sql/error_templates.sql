-- Fleet table: the error and warning lines of every run mined into templates (variable parts as <*>).
-- `line_templates` (message -> template) is what Drain3 made of the messages (pipeline/error_templates.py
-- registers it before this runs); traceback furniture (frames, code, headers) has no template.
-- `known`: a run_events pattern gives some line of the template a class of its own (not error_other or
-- warning_other). `seen_at`: the line's time, else the latest earlier in its file, else its run's.
-- `root_cause_of`: the runs whose root-cause line (run_summary) is one of the template's lines.
-- `lines_by_run`: per run, its lines of the template and the first of them, in its log's last launch (run_launches:
-- a run report is about the last of the runs a log holds).
with lines as (
    select
        e.run_id, e.file, e.line_no, e.segment, e.kind, e.event_class, e.message, t.template,
        e.event_class not in ('error_other', 'warning_other') as named,
        coalesce(e.ts, e.order_ts, r.last_ts, r.mtime, r.ingested_at) as seen_at
    from run_events as e
    join line_templates as t using (message)
    left join runs as r using (run_id)
),
per_run as (
    -- each run's lines of a template: how many and where the first is (a run report groups its caught errors)
    select template, list({'run_id': run_id, 'n_lines': n, 'first_file': f, 'first_line_no': ln}
                          order by run_id) as lines_by_run
    from (select template, run_id, count(*) as n, arg_min(file, line_no) as f, min(line_no) as ln
          from lines as l
          left join run_launches as la using (run_id)
          where l.segment >= la.launch_segment or l.file is distinct from la.launch_file
          group by all)
    group by all
),
roots as (
    select l.template, list(distinct l.run_id order by l.run_id) as root_cause_of
    from lines as l
    join run_summary as s
      on s.run_id = l.run_id and s.root_cause_file = l.file and s.root_cause_line_no = l.line_no
    group by all
),
counted as (
    select
        template,
        count(distinct run_id) as n_runs,
        count(*) as n_lines,
        min(seen_at) as first_seen,
        max(seen_at) as last_seen,
        arg_min(message, (seen_at, run_id, file, line_no)) as example,
        bool_or(named) as known,
        arg_min(run_id, (seen_at, run_id, file, line_no)) as example_run_id,
        arg_min(file, (seen_at, run_id, file, line_no)) as example_file,
        arg_min(line_no, (seen_at, run_id, file, line_no)) as example_line_no,
        mode(kind) as kind,
        mode(event_class) as event_class,
        list(distinct run_id order by run_id) as run_ids
    from lines
    group by all
)
-- the per-template lists joined to a template's one row, not to each of its lines (a warning every run prints
-- would carry its list of every run into each of its lines: 1.1 GB at 3,000 runs)
select c.*, coalesce(r.root_cause_of, []) as root_cause_of, pr.lines_by_run
from counted as c
left join roots as r using (template)
left join per_run as pr using (template)
order by known, n_runs desc, n_lines desc, template
