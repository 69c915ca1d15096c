-- SQLite queries of children.py: triggers (children stored, the parent's wait), resumes, cancels of a tree.
-- Conventions (parameters, clock, batches): database.sql.

-- name: trigger_children
-- The parent's running attempt, fenced: a trigger from an attempt taken over stores nothing.
SELECT id, attempt, queue, partition_key, tags, parent_id, root_id, depth, awaited, cancel_requested, status,
       started_at IS NULL AS unstarted
FROM tidegate_runs
WHERE id = :id AND attempt = :attempt AND status = 'running' AND worker_id = :worker;

-- name: trigger_children_started
-- The attempt's start, when no turn of its worker recorded it yet (the claim unset started_at):
-- recorded with the trigger, whose RunStarted goes first among its events; a start the worker
-- reports later finds it set and adds nothing (cycle_reports_starts).
UPDATE tidegate_runs SET started_at = :now WHERE id = :id AND attempt = :attempt AND started_at IS NULL;

-- name: trigger_children_insert
INSERT INTO tidegate_runs (
    id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at,
    parent_id, root_id, depth, child_index, awaited, on_parent_cancel, trace_context)
VALUES (
    :id, :task, :queue, :partition_key, :rate_key, :rate_cost, 'queued', :priority, :args, :tags, :concurrency_key, 0, :max_attempts,
    :retry_backoff, :timeout, :now, :now, :now + :delay, :now + :deadline,
    :parent_id, :root_id, :depth, :child_index, :awaited, :on_parent_cancel, :trace_context);

-- name: trigger_children_awaited
-- A child stored by a fire-and-forget trigger, now awaited by a replay that waits for it.
UPDATE tidegate_runs SET awaited = 1
WHERE parent_id = :parent AND child_index IN (SELECT value FROM json_each(:indexes));

-- name: trigger_children_awaited_links
-- The same for a linked child (a unique child's holder, storage/shared/child_links.py).
UPDATE tidegate_child_links SET awaited = 1
WHERE parent_id = :parent AND child_index IN (SELECT value FROM json_each(:indexes));

-- name: trigger_children_holders
-- The runs holding the keys of a trigger's unique children (unique.sql's `unique_holders` rule),
-- with what the parent learns of a linked child and what a wait on it decides its scopes by.
SELECT k.key, r.id, r.status, r.queue, r.partition_key, r.tags, r.result, r.error
FROM tidegate_unique_keys AS k
JOIN tidegate_runs AS r ON r.id = k.run_id
WHERE k.key IN (SELECT value FROM json_each(:keys))
  AND (instr(k.holds, '|' || r.status || '|') > 0 OR (r.status = 'completed' AND k.expires_at > :now));

-- name: trigger_children_link
-- A position of the parent answered by its key's holder: no run stored, the holder linked.
INSERT INTO tidegate_child_links (parent_id, child_index, run_id, task, args, awaited)
VALUES (:parent, :child_index, :run_id, :task, :args, :awaited);

-- name: trigger_children_chain
-- The runs above the parent, nearest first (each with what `waiting.ancestors` reads).
WITH RECURSIVE up(id, parent_id, status, awaited, wait_kept, wait_released, hops) AS (
    SELECT id, parent_id, status, awaited, wait_kept, wait_released, 0 FROM tidegate_runs WHERE id = :id
    UNION ALL
    SELECT r.id, r.parent_id, r.status, r.awaited, r.wait_kept, r.wait_released, up.hops + 1
    FROM tidegate_runs AS r JOIN up ON r.id = up.parent_id
    WHERE up.hops < 10000
)
SELECT id, parent_id, status, awaited, wait_kept, wait_released FROM up WHERE hops > 0 ORDER BY hops;

-- name: trigger_children_held
-- The parent's own run-level holders (holder = the run id; a step's are RUN/STEPKEY).
SELECT scope FROM tidegate_holders WHERE run_id = :id AND holder = :id;

-- name: trigger_children_wait
-- The attempt ends waiting: no worker, no lease. A wait is not an attempt: max_attempts grows by
-- one as the next claim's attempt does (the hand-back's rule, domain.integers.grown), so the
-- budget is untouched.
UPDATE tidegate_runs SET
    status = 'waiting', worker_id = NULL, lease_expires_at = NULL,
    max_attempts = min(max_attempts, :most_attempts - 1) + 1, child_waits = child_waits + 1,
    wait_kept = :kept, wait_released = :released, wait_remaining = :remaining, waiting_since = :now
WHERE id = :id AND attempt = :attempt AND status = 'running'
RETURNING id;

-- name: trigger_children_release
-- Released slots (and every step slot of the run) go at once; kept ones stay, no longer leased
-- by a worker: they last until the run resumes or ends (the sweep knows waiting runs hold them).
DELETE FROM tidegate_holders
WHERE run_id = :id AND scope NOT IN (SELECT value FROM json_each(:kept));

-- name: trigger_children_keep
UPDATE tidegate_holders SET worker_id = NULL, expires_at = :forever WHERE run_id = :id;

-- name: trigger_children_blocked
-- The blocked runs a wait may deadlock with (domain/wait_graph.py), read with the wait applied:
-- every waiting run, and every queued child some waiting run awaits, once per awaiting parent
-- (linked children: a row per link, parent_id the linking parent). None while no waiting run
-- keeps a slot: then no scope is held by a run that cannot go on, and no wait can deadlock
-- (the common case, read by one probe of the waiting runs) unless it waits on a linked run
-- (:every), which may close a circle of waits with no slot at stake (WaitCycle).
WITH keepers AS (
    SELECT 1 AS any_kept FROM tidegate_runs WHERE status = 'waiting' AND wait_kept <> '[]' LIMIT 1
), asked AS (
    SELECT 1 AS asked WHERE :every OR EXISTS (SELECT 1 FROM keepers)
)
SELECT r.id, r.status, r.queue, r.partition_key, r.tags, r.wait_kept, r.parent_id, r.awaited
FROM tidegate_runs AS r WHERE r.status = 'waiting' AND EXISTS (SELECT 1 FROM asked)
UNION ALL
SELECT c.id, c.status, c.queue, c.partition_key, c.tags, c.wait_kept, c.parent_id, c.awaited
FROM tidegate_runs AS w JOIN tidegate_runs AS c ON c.parent_id = w.id
WHERE w.status = 'waiting' AND c.status = 'queued' AND c.awaited = 1 AND EXISTS (SELECT 1 FROM asked)
UNION ALL
SELECT c.id, c.status, c.queue, c.partition_key, c.tags, c.wait_kept, l.parent_id, l.awaited
FROM tidegate_child_links AS l
JOIN tidegate_runs AS w ON w.id = l.parent_id
JOIN tidegate_runs AS c ON c.id = l.run_id
WHERE w.status = 'waiting' AND l.awaited = 1 AND c.status IN ('queued', 'waiting') AND EXISTS (SELECT 1 FROM asked);

-- name: run_children
-- With each child's shape (partition, tags): what a wait on it decides its scopes by. Linked
-- children (storage/shared/child_links.py) with the parent's call (task, args) and the holder's
-- run (id, status, outcome).
SELECT id, child_index, task, queue, partition_key, tags, args, status, awaited, result, error, 0 AS linked
FROM tidegate_runs WHERE parent_id = :parent
UNION ALL
SELECT r.id, l.child_index, l.task, r.queue, r.partition_key, r.tags, l.args, r.status, l.awaited, r.result, r.error,
       1 AS linked
FROM tidegate_child_links AS l JOIN tidegate_runs AS r ON r.id = l.run_id
WHERE l.parent_id = :parent
ORDER BY child_index;

-- name: resume_parents
-- Waiting parents (of the runs :ids, their own or linked to them, or every waiting run when :ids
-- is NULL: the sweep's backstop) with at most `wait_remaining` awaited children (own and linked)
-- unfinished (NULL: none; a wait on any child: one fewer than when it began to wait): back to
-- the queue ahead of its other runs (`resumed`, which leads the claim order; scheduled_at kept),
-- with no dispatch deadline any more (they were dispatched once).
UPDATE tidegate_runs SET
    status = 'queued', queued_at = :now, wait_kept = NULL, wait_released = NULL, wait_remaining = NULL,
    deadline_at = NULL, block_reason = NULL, resumed = 1
WHERE status = 'waiting'
  AND (:ids IS NULL
       OR id IN (SELECT r.parent_id FROM tidegate_runs AS r
                 WHERE r.id IN (SELECT value FROM json_each(:ids)) AND r.parent_id IS NOT NULL)
       OR id IN (SELECT l.parent_id FROM tidegate_child_links AS l WHERE l.run_id IN (SELECT value FROM json_each(:ids))))
  AND (SELECT count(*) FROM tidegate_runs AS c
       WHERE c.parent_id = tidegate_runs.id AND c.awaited = 1 AND c.status NOT IN ('completed', 'failed', 'canceled'))
      + (SELECT count(*) FROM tidegate_child_links AS l JOIN tidegate_runs AS c ON c.id = l.run_id
         WHERE l.parent_id = tidegate_runs.id AND l.awaited = 1 AND c.status NOT IN ('completed', 'failed', 'canceled'))
      <= max(coalesce(wait_remaining, 0), 0)
RETURNING id, :now - waiting_since AS waited;

-- name: cancel_run_tree
-- The run and its unfinished descendants linked to cancel with it (`abandon` children, and
-- what is below them, are kept).
WITH RECURSIVE tree(id, parent_id) AS (
    SELECT id, parent_id FROM tidegate_runs WHERE id = :id
    UNION ALL
    SELECT r.id, r.parent_id FROM tidegate_runs AS r JOIN tree ON r.parent_id = tree.id
    WHERE r.on_parent_cancel = 'cancel' AND r.status NOT IN ('completed', 'failed', 'canceled')
)
SELECT id, parent_id FROM tree;

-- name: cancel_run_tree_queued
UPDATE tidegate_runs SET status = 'canceled', finished_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'queued'
RETURNING id;

-- name: cancel_run_waiting
UPDATE tidegate_runs SET status = 'canceled', finished_at = :now, wait_kept = NULL, wait_released = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'waiting'
RETURNING id;

-- name: cancel_run_requested
-- The worker running each learns this in its next cycle and ends the attempt.
UPDATE tidegate_runs SET cancel_requested = 1 WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running';
