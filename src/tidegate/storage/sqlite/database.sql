-- SQLite queries, one block per port verb (or step of one).
-- Parameters are named (:name); :now is the adapter's clock, which is the
-- database's clock for an embedded file. Lists arrive as JSON arrays and are
-- unpacked with json_each so that a batch is one statement.
-- Each aggregate keeps its statements in its own file (runs.sql, claims.sql, ...);
-- this one holds those several aggregates share.

-- name: insert_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (:run_id, :step_key, :type, :metadata, :now);

-- name: release_holders
DELETE FROM tidegate_holders WHERE run_id IN (SELECT value FROM json_each(:ids));
