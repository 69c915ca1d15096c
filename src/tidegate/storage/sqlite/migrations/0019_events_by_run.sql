-- A run's events are found by run_id alone, as on PostgreSQL (where it lets B-tree deduplication
-- merge a run's entries). Here every index entry ends with the rowid, which is the event id, so
-- the entries, their order and their bytes are what (run_id, id) gave: the same definition in
-- both dialects, nothing lost.
DROP INDEX tidegate_events_run;
CREATE INDEX tidegate_events_run ON tidegate_events (run_id);
