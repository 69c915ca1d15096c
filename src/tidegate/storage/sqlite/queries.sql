-- SQLite queries, one block per port verb (or step of one).
-- Parameters are named (:name); :now is the adapter's clock, which is the
-- database's clock for an embedded file. Lists arrive as JSON arrays and are
-- unpacked with json_each so that a batch is one statement.

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at) VALUES (:version, :name, :now);

-- name: register_task
INSERT INTO tidegate_tasks (name, queue, priority, tags, max_attempts, retry_backoff, timeout, updated_at)
VALUES (:name, :queue, :priority, :tags, :max_attempts, :retry_backoff, :timeout, :now)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout
FROM tidegate_tasks WHERE name = :name;

-- name: enqueue
INSERT INTO tidegate_runs (
    id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at)
VALUES (
    :id, :task, :queue, 'queued', :priority, :args, :tags, :concurrency_key, 0, :max_attempts,
    :retry_backoff, :timeout, :now, :now, :now + :delay);

-- name: insert_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (:run_id, NULL, :type, :metadata, :now);

-- name: record_starts
UPDATE tidegate_runs SET started_at = :now
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: record_outcomes
-- Fenced on (id, attempt, running): an outcome from an attempt that was taken
-- over matches no row and is reported back as fenced out. A run whose cancel
-- was requested ends canceled unless it completed: a retry must not undo it.
UPDATE tidegate_runs SET
    status = CASE WHEN tidegate_runs.cancel_requested = 1 AND o.status IN ('queued', 'failed') THEN 'canceled'
                  ELSE o.status END,
    result = o.result,
    error = o.error,
    finished_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN NULL ELSE :now END,
    queued_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN :now
                     ELSE tidegate_runs.queued_at END,
    scheduled_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN :now + o.delay
                        ELSE tidegate_runs.scheduled_at END,
    worker_id = NULL,
    lease_expires_at = NULL,
    cancel_requested = 0
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.status') AS status,
             json_extract(value, '$.result') AS result,
             json_extract(value, '$.error') AS error,
             coalesce(json_extract(value, '$.delay'), 0) AS delay
      FROM json_each(:outcomes)) AS o
WHERE tidegate_runs.id = o.id AND tidegate_runs.attempt = o.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status;

-- name: cancel_requests
SELECT id, attempt FROM tidegate_runs
WHERE worker_id = :worker AND status = 'running' AND cancel_requested = 1;

-- name: claim_candidates
-- One queue at a time so that the claim index delivers rows in order: the
-- cost is the batch size, not the backlog.
SELECT id, priority, scheduled_at FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND +scheduled_at <= :now
ORDER BY priority DESC, scheduled_at, id
LIMIT :limit;

-- name: claim_runs
UPDATE tidegate_runs SET
    status = 'running', attempt = attempt + 1, worker_id = :worker,
    lease_expires_at = :now + :lease, started_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'queued'
RETURNING id, task, queue, args, attempt, max_attempts, retry_backoff, timeout;

-- name: next_due
SELECT min(scheduled_at) - :now FROM tidegate_runs WHERE status = 'queued' AND queue = :queue;

-- name: renew_leases
UPDATE tidegate_runs SET lease_expires_at = :now + :lease
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong. A run whose cancel was asked ends canceled.
UPDATE tidegate_runs SET
    status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END,
    finished_at = CASE WHEN cancel_requested = 1 THEN :now ELSE NULL END,
    max_attempts = max_attempts + 1,
    queued_at = :now, scheduled_at = :now, worker_id = NULL, lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status;

-- name: take_lock
INSERT INTO tidegate_locks (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < :now OR tidegate_locks.holder = excluded.holder
RETURNING holder;

-- name: expired_leases
SELECT id, attempt, max_attempts, cancel_requested, worker_id FROM tidegate_runs
WHERE status = 'running' AND lease_expires_at < :now;

-- name: recover_expired
-- Rescue counts as an attempt: a run that keeps killing its worker ends failed.
UPDATE tidegate_runs SET
    status = CASE WHEN cancel_requested = 1 THEN 'canceled'
                  WHEN attempt >= max_attempts THEN 'failed'
                  ELSE 'queued' END,
    error = CASE WHEN cancel_requested = 1 THEN error
                 WHEN attempt >= max_attempts THEN 'lease expired: the worker stopped renewing it (attempt ' || attempt || ' of ' || max_attempts || ')'
                 ELSE error END,
    finished_at = CASE WHEN cancel_requested = 1 OR attempt >= max_attempts THEN :now ELSE NULL END,
    queued_at = :now, scheduled_at = :now, worker_id = NULL, lease_expires_at = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'running' AND +lease_expires_at < :now
RETURNING id, attempt, status;

-- name: cancel_queued
UPDATE tidegate_runs SET status = 'canceled', finished_at = :now
WHERE id = :id AND status = 'queued'
RETURNING id;

-- name: request_cancel
UPDATE tidegate_runs SET cancel_requested = 1
WHERE id = :id AND status = 'running'
RETURNING id;

-- name: run_status
SELECT status FROM tidegate_runs WHERE id = :id;

-- name: pending_count
SELECT (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue)
     + (SELECT count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue);

-- name: get_run
SELECT * FROM tidegate_runs WHERE id = :id;

-- name: list_runs
SELECT * FROM tidegate_runs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: run_events
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_events
WHERE run_id = :run_id ORDER BY id;

-- name: status_counts
SELECT status, count(*) FROM tidegate_runs WHERE (:queue IS NULL OR queue = :queue) GROUP BY status;
