-- The attempt and the worker of an event in columns of their own (issue 29, docs/postgres-scale.md,
-- "Taken: the hot events' attempt and worker in columns"). Every run writes RunDequeued and
-- RunStarted ({attempt, worker}) and its outcome ({attempt, ...}): in jsonb those keys took 61 of the
-- event's 144 bytes, as an integer and a text column about 23, and a metadata left empty is stored
-- as NULL (nothing: the row has a null bitmap already) rather than '{}' (5 bytes and an alignment
-- pad). The hot writers (the cycle, the claims) fill the columns and leave the keys out of
-- `metadata`; every other writer still writes them in `metadata`, and old rows keep them there.
-- Nothing reads the table's `metadata` alone: tidegate_event_log gives every event its whole
-- metadata back (the columns merged in as keys, as the events contract in domain/events.py has them;
-- a column left NULL adds nothing), and every read of events goes through it.
ALTER TABLE tidegate_events ADD COLUMN attempt integer;
ALTER TABLE tidegate_events ADD COLUMN worker text;
ALTER TABLE tidegate_events ALTER COLUMN metadata DROP NOT NULL;

CREATE VIEW tidegate_event_log AS
SELECT id, run_id, step_key, type,
       coalesce(metadata, '{}') || jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'worker', worker)) AS metadata,
       at
FROM tidegate_events;
