-- PostgreSQL queries of telemetry.py: what the event stream and the metrics read.
-- Conventions (parameters, clock, batches): database.sql.

-- name: events_after
-- Every event (of runs and of limits) after an id, oldest first: the event stream's
-- read, resumable from the last id a client saw. One range scan of the primary key.
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_events
WHERE id > %(after)s::bigint
ORDER BY id
LIMIT %(limit)s::integer;

-- name: latest_events
-- The newest events of one type (LimitChanged: the audit; CapacityOverflow: the signals), newest
-- first: a backward scan of the primary key.
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_events
WHERE type = %(type)s
ORDER BY id DESC
LIMIT %(limit)s::integer;

-- name: blocked_counts
-- Queued runs per scope named in their stored block reason (a run blocked by two
-- saturated scopes counts for each).
SELECT reason ->> 'scope' AS scope, count(*) AS blocked
FROM tidegate_runs,
     jsonb_array_elements(CASE WHEN jsonb_typeof(block_reason) = 'array' THEN block_reason ELSE '[]' END) AS reason
WHERE status = 'queued' AND block_reason IS NOT NULL AND reason ->> 'scope' IS NOT NULL
GROUP BY 1;

-- name: run_counts
-- Runs per (queue, status): the fleet-wide gauge of `/metrics`, read at scrape time.
SELECT queue, status, count(*) FROM tidegate_runs GROUP BY queue, status;

-- name: last_event_id
-- Where a new event stream starts (0 before any event): the top of the primary key.
SELECT coalesce(max(id), 0) FROM tidegate_events;
