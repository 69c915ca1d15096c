-- A run's events are found by run_id alone. With the event id in the key no two entries were
-- equal, so B-tree deduplication could not merge a run's entries into one; keyed by run_id, a
-- run's four lifecycle events share one key and a posting list (docs/postgres-scale.md: 237 to
-- 78 bytes per run when built fresh). Readers still ask for ORDER BY id: a sort of a run's few rows.
DROP INDEX tidegate_events_run;
CREATE INDEX tidegate_events_run ON tidegate_events (run_id);
