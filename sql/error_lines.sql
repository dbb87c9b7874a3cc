-- The error and warning lines the template miner reads (pipeline/error_templates.py), one row per line:
-- run_events without the traceback furniture (frames, code, headers) that every traceback shares.
-- `named`: a pattern of run_events gives the line a class of its own (not `error_other`/`warning_other`).
-- `seen_at`: the line's time, else the latest earlier in its file, else its run's.
select
    e.run_id, e.file, e.line_no, e.kind, e.event_class, e.message,
    e.event_class not in ('error_other', 'warning_other') as named,
    coalesce(e.ts, e.order_ts, r.last_ts, r.mtime, r.ingested_at) as seen_at
from run_events as e
left join runs as r using (run_id)
where e.event_class not in ('traceback', 'traceback_frame', 'traceback_code', 'chained_exception')
  and trim(e.message) <> ''
