-- SQLite queries of runs.py: task definitions, submits (admission), cancels, reads of runs and events.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_tasks
-- A worker registering (:worker_id set) is remembered with the time; a submitter or server
-- registering leaves the last worker as it was.
INSERT INTO tidegate_tasks (
    name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
    unique_rule, rate_cost, worker_id, worker_seen_at, updated_at)
VALUES (
    :name, :queue, :priority, :tags, :max_attempts, :retry_backoff, :timeout, :dispatch_deadline, :parameters,
    :unique_rule, :rate_cost, :worker_id, CASE WHEN :worker_id IS NULL THEN NULL ELSE :now END, :now)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, dispatch_deadline = excluded.dispatch_deadline, parameters = excluded.parameters,
    unique_rule = excluded.unique_rule, rate_cost = excluded.rate_cost,
    worker_id = coalesce(excluded.worker_id, tidegate_tasks.worker_id),
    worker_seen_at = coalesce(excluded.worker_seen_at, tidegate_tasks.worker_seen_at),
    updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
       unique_rule, rate_cost
FROM tidegate_tasks WHERE name = :name;

-- name: list_tasks
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
       unique_rule, rate_cost, worker_id, worker_seen_at, updated_at
FROM tidegate_tasks ORDER BY name;

-- name: enqueue
-- `keyed`: the run takes a unique key in this transaction (unique.py; a claim reads it: claims.sql).
INSERT INTO tidegate_runs (
    id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at, trace_context, keyed)
VALUES (
    :id, :task, :queue, :partition_key, :rate_key, :rate_cost, 'queued', :priority, :args, :tags, :concurrency_key, 0, :max_attempts,
    :retry_backoff, :timeout, :now, :now, :now + :delay, :now + :deadline, :trace_context, :keyed);

-- name: run_status
SELECT status FROM tidegate_runs WHERE id = :id;

-- name: pending_count
-- A waiting parent is pending too: it comes back to its queue once its children end.
SELECT (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue)
     + (SELECT count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue)
     + (SELECT count(*) FROM tidegate_runs WHERE status = 'waiting' AND queue = :queue);

-- name: get_run
SELECT * FROM tidegate_runs WHERE id = :id;

-- name: run_events
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_event_log
WHERE run_id = :run_id ORDER BY id;

-- name: status_counts
SELECT status, count(*) FROM tidegate_runs WHERE (:queue IS NULL OR queue = :queue) GROUP BY status;

-- name: list_queued
SELECT * FROM tidegate_runs
WHERE status = 'queued' AND (:queue IS NULL OR queue = :queue)
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT :limit;

-- name: queue_position
SELECT
    (SELECT count(*) FROM tidegate_runs
     WHERE status = 'queued' AND queue = :queue
       AND (resumed > :resumed OR (resumed = :resumed
            AND (priority > :priority OR (priority = :priority
                 AND (scheduled_at < :scheduled_at OR (scheduled_at = :scheduled_at AND id < :id))))))),
    (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue);

-- name: enqueue_active
-- The active runs (queued, running, waiting) of one admission ceiling (:queue NULL: all queues),
-- a count per status on the index that serves it: without statistics the planner would scan the
-- listing index, finished runs and all, on every submit. CASE runs only the branch it takes.
SELECT CASE WHEN :queue IS NULL THEN
           (SELECT count(*) FROM tidegate_runs INDEXED BY tidegate_runs_claim WHERE status = 'queued')
         + (SELECT count(*) FROM tidegate_runs INDEXED BY tidegate_runs_lease WHERE status = 'running')
         + (SELECT count(*) FROM tidegate_runs INDEXED BY tidegate_runs_waiting WHERE status = 'waiting')
       ELSE (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue)
         + (SELECT count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue)
         + (SELECT count(*) FROM tidegate_runs WHERE status = 'waiting' AND queue = :queue)
       END;

