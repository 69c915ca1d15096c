-- tidegate_event_log, as on PostgreSQL (whose 0026 moved the attempt and the worker of its hot events
-- out of `metadata` into columns, and merges them back in this view): here the events keep their
-- whole metadata in the table, so the view is the table. Every read of events, in the adapters and
-- in SQL written for both dialects, goes through it.
CREATE VIEW tidegate_event_log AS
SELECT id, run_id, step_key, type, metadata, at
FROM tidegate_events;
