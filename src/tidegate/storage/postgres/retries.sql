-- PostgreSQL queries of retries.py: an operator's retry of a failed or canceled run.

-- name: retry_run_lock
-- The row is locked until the update: the status the retry rule judges cannot change in between.
SELECT status, attempt, max_attempts, queue FROM tidegate_runs WHERE id = %(id)s::text FOR UPDATE;

-- name: retry_run
-- Queued again now, as a fresh entry in the queue: the last attempt's times, worker, result
-- and error are cleared (its events keep them); a dispatch deadline counts again from now.
UPDATE tidegate_runs SET
    status = 'queued', max_attempts = %(max_attempts)s::integer, manual_retries = manual_retries + 1,
    queued_at = tidegate_now(), scheduled_at = tidegate_now(),
    deadline_at = tidegate_now() + (deadline_at - submitted_at),
    started_at = NULL, finished_at = NULL, worker_id = NULL, lease_expires_at = NULL, cancel_requested = false,
    result = NULL, error = NULL, block_reason = NULL
WHERE id = %(id)s::text AND status = %(status)s::text
RETURNING id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
          submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
          cancel_requested, result, error, block_reason, suspect,
          child_waits, worker_shutdowns, lost_workers, manual_retries, rate_key, snoozes;
