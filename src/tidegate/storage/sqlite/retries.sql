-- SQLite queries of retries.py: an operator's retry of a failed or canceled run.
-- Conventions (parameters, clock, batches): database.sql.

-- name: retry_run_lock
-- Read under the write lock (BEGIN IMMEDIATE): the status the retry rule judges cannot change before the update.
SELECT status, attempt, max_attempts, queue FROM tidegate_runs WHERE id = :id;

-- name: retry_run
-- Queued again now, as a fresh entry in the queue: the last attempt's times, worker, result
-- and error are cleared (its events keep them); a dispatch deadline counts again from now.
UPDATE tidegate_runs SET
    status = 'queued', max_attempts = :max_attempts, manual_retries = manual_retries + 1, queued_at = :now, scheduled_at = :now,
    deadline_at = CASE WHEN deadline_at IS NULL THEN NULL ELSE :now + (deadline_at - submitted_at) END,
    started_at = NULL, finished_at = NULL, worker_id = NULL, lease_expires_at = NULL, cancel_requested = 0,
    result = NULL, error = NULL, block_reason = NULL
WHERE id = :id AND status = :status
RETURNING *;
