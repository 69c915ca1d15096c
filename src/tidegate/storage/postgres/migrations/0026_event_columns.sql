-- The attempt and the worker of an event in columns of their own (issue 29, docs/postgres-profile.md,
-- "Bytes per finished run"). Every run writes RunDequeued and RunStarted ({attempt, worker}) and its
-- outcome ({attempt, ...}): in jsonb those two keys took 61 of the event's 144 bytes, as an integer
-- and a text column about 23. The hot writers (the cycle, the claims) fill the columns and leave the
-- keys out of `metadata`; every other writer still writes them in `metadata`, and old rows keep them
-- there. Nothing reads the table's `metadata` alone: tidegate_event_log gives every event its whole
-- metadata back (the columns merged in as keys, as the events contract in domain/events.py has them;
-- a column left NULL adds nothing), and every read of events goes through it.
ALTER TABLE tidegate_events ADD COLUMN attempt integer;
ALTER TABLE tidegate_events ADD COLUMN worker text;

CREATE VIEW tidegate_event_log AS
SELECT id, run_id, step_key, type,
       metadata || jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'worker', worker)) AS metadata,
       at
FROM tidegate_events;
