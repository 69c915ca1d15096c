-- PostgreSQL queries, one block per port verb (or `verb_step` for a step of one).
-- Parameters are named (%(name)s) and always cast, so a prepared statement
-- keeps one plan whatever Python type arrives. Every time is tidegate_now():
-- the server's clock, the one all workers share, plus the injected clock's offset. Batches arrive as arrays (unnest)
-- or as one JSON document (jsonb_to_recordset), so a batch is one statement.
-- Table names are unqualified: the connection's search_path picks the schema.
-- Steps that write runs also write their events in the same statement, so a
-- verb's statements can be pipelined without waiting on each other's rows.
-- Each aggregate keeps its statements in its own file (runs.sql, claims.sql, ...);
-- this one holds those several aggregates share.

-- The wake-up (NOTIFY) is not a named query: the transaction helpers send it at
-- a verb's commit (pipeline.py `send_wake`), on this channel.
-- name: listen_channel
SELECT 'tidegate_' || md5(current_schema());

-- name: upsert_scopes
-- Lock rows for the scopes the candidates need, created on first use, in key
-- order (two claimers inserting the same new keys then wait in the same order).
INSERT INTO tidegate_scopes (key)
SELECT k.key FROM unnest(%(keys)s::text[]) AS k(key) ORDER BY k.key COLLATE "C"
ON CONFLICT (key) DO NOTHING;

-- name: lock_scopes
-- The scopes of every candidate, locked in key order (rows are locked after
-- the ordered index scan): claimers that share a scope queue up here instead of
-- both seeing its last free slot, and the common order rules out deadlocks.
-- Only the statements after this one read usage: under READ COMMITTED each
-- sees every claim committed before it, so the sum is exact while the lock is held.
-- Not redundant with the claim turns: those are per queue, and claimers of two
-- queues that share a scope (the global cap, a tag) meet nowhere else (their
-- holder rows differ by run, upsert_scopes waits only on a key not yet
-- committed). It is rarely seen under load only because a worker that frees a
-- slot takes it again in the same commit; tests/test_serialization.py forces it.
SELECT key FROM tidegate_scopes WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE;

-- name: insert_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (%(run_id)s::text, %(step_key)s::text, %(type)s::text, %(metadata)s::jsonb, tidegate_now());
