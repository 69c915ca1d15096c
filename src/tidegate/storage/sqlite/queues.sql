-- SQLite queries of queues.py: each queue's run counts, and pausing or resuming a queue.
-- Conventions (parameters, clock, batches): database.sql.

-- name: queue_counts
-- Queued and running runs per queue (how many are blocked is derived: queued_shapes).
SELECT queue,
       sum(status = 'queued') AS queued,
       sum(status = 'running') AS running
FROM tidegate_runs WHERE status IN ('queued', 'running') GROUP BY queue ORDER BY queue;

-- name: set_queue_paused
-- A row only when the flag changed; the caller then moves the rules version (limits.sql).
UPDATE tidegate_queues SET paused = :paused, updated_at = :now WHERE name = :name AND paused <> :paused
RETURNING name;

-- name: set_queue_paused_known
SELECT 1 FROM tidegate_queues WHERE name = :name;

-- name: set_queue_paused_since
-- When the queue was last paused: its latest pause event (queue_paused in domain/events.py).
SELECT max(at) FROM tidegate_events
WHERE run_id IS NULL AND type = 'LimitChanged'
  AND json_extract(metadata, '$.target') = 'queue:' || :name AND json_extract(metadata, '$.paused') = 1;

-- name: set_queue_paused_deadlines
-- The queued runs of a resuming queue that have a dispatch deadline (domain/deadlines.py moves it).
SELECT id, deadline_at, queued_at FROM tidegate_runs
WHERE queue = :name AND status = 'queued' AND deadline_at IS NOT NULL;

-- name: set_queue_paused_deadline
UPDATE tidegate_runs SET deadline_at = :deadline_at WHERE id = :id AND status = 'queued';
