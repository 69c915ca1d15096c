-- PostgreSQL queries of browse.py: paging through runs for operators and the HTTP API.

-- name: page_runs
-- Newest first by id (ULIDs sort by creation time); `before` is the last id of the previous
-- page, so a page costs an index range scan however deep it is. `tags` is a JSON object of
-- tags every run must carry (`{}` for none).
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect, resumed,
       child_waits, worker_shutdowns, lost_workers, manual_retries, rate_key, snoozes
FROM tidegate_runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(before)s::text IS NULL OR id < %(before)s::text)
  AND tags @> %(tags)s::jsonb
ORDER BY id DESC
LIMIT %(limit)s::integer;
