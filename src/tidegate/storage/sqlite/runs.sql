-- SQLite queries of runs.py: task definitions, submits (admission), cancels, reads of runs and events.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_tasks
INSERT INTO tidegate_tasks (
    name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, updated_at)
VALUES (:name, :queue, :priority, :tags, :max_attempts, :retry_backoff, :timeout, :dispatch_deadline, :now)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, dispatch_deadline = excluded.dispatch_deadline, updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline
FROM tidegate_tasks WHERE name = :name;

-- name: enqueue
INSERT INTO tidegate_runs (
    id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at)
VALUES (
    :id, :task, :queue, :partition_key, 'queued', :priority, :args, :tags, :concurrency_key, 0, :max_attempts,
    :retry_backoff, :timeout, :now, :now, :now + :delay, :now + :deadline);

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

-- name: list_queued
SELECT * FROM tidegate_runs
WHERE status = 'queued' AND (:queue IS NULL OR queue = :queue)
ORDER BY priority DESC, scheduled_at, id
LIMIT :limit;

-- name: queue_position
SELECT
    (SELECT count(*) FROM tidegate_runs
     WHERE status = 'queued' AND queue = :queue
       AND (priority > :priority OR (priority = :priority
            AND (scheduled_at < :scheduled_at OR (scheduled_at = :scheduled_at AND id < :id))))),
    (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue);

-- name: enqueue_active
SELECT count(*) FROM tidegate_runs WHERE status IN ('queued', 'running') AND (:queue IS NULL OR queue = :queue);

-- name: enqueue_recent
SELECT count(*) FROM tidegate_runs
WHERE finished_at >= :since AND status IN ('completed', 'failed', 'canceled') AND (:queue IS NULL OR queue = :queue);
