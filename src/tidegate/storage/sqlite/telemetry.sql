-- SQLite queries of telemetry.py: what the event stream and the metrics read.
-- Conventions (parameters, clock, batches): database.sql.

-- name: events_after
-- Every event (of runs and of limits) after an id, oldest first: the event stream's
-- read, resumable from the last id a client saw. One range scan of the primary key.
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_event_log
WHERE id > :after
ORDER BY id
LIMIT :limit;

-- name: latest_events
-- The newest events of one type (LimitChanged: the audit; CapacityOverflow: the signals), newest
-- first: a backward scan of the primary key.
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_event_log
WHERE type = :type
ORDER BY id DESC
LIMIT :limit;

-- name: queued_shapes
-- Queued runs grouped by what decides their scopes (queue, partition, tags, rate partition): the
-- counts of blocked runs classify each group once (domain/blocking.py), never each run.
SELECT queue, partition_key, tags, rate_key, count(*) AS runs
FROM tidegate_runs
WHERE status = 'queued'
GROUP BY queue, partition_key, tags, rate_key;

-- name: run_counts
-- Runs per (queue, status): the fleet-wide gauge of `/metrics`, read at scrape time.
SELECT queue, status, count(*) FROM tidegate_runs GROUP BY queue, status;

-- name: last_event_id
-- Where a new event stream starts (0 before any event): the top of the primary key.
SELECT coalesce(max(id), 0) FROM tidegate_events;
