-- A run's events are found by run_id alone, as on PostgreSQL (where it lets B-tree deduplication
-- merge a run's entries). Here every index entry ends with the rowid, which is the event id: the
-- entries and their order are what (run_id, id) gave, without the id stored twice in each
-- (about 16 bytes per run of four events).
DROP INDEX tidegate_events_run;
CREATE INDEX tidegate_events_run ON tidegate_events (run_id);
