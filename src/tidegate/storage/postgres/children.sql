-- PostgreSQL queries of children.py: triggers (children stored, the parent's wait), resumes, cancels of a tree.
-- Conventions (parameters, clock, batches): database.sql.

-- name: trigger_children_lock
-- A wait that keeps a slot is checked alone (domain/wait_graph.py over the blocked runs), so two
-- concurrent waits never both pass a check that each would fail with the other's keeper.
SELECT pg_advisory_xact_lock(hashtext('tidegate:waits'), hashtext(coalesce(current_schema(), '')));

-- name: trigger_children_lock_shared
-- A wait that keeps nothing adds no keeper: waits like it are checked side by side, after every
-- keeping wait before them committed.
SELECT pg_advisory_xact_lock_shared(hashtext('tidegate:waits'), hashtext(coalesce(current_schema(), '')));

-- name: trigger_children_lock_children
-- The stored children a trigger may turn awaited (a replay that waits on a fire-and-forget child),
-- locked before their parent's row: a child's end locks the child, then the parent
-- (resume_parents_lock), and the lock order is the same on every path (children.py's docstring).
SELECT id FROM tidegate_runs
WHERE parent_id = %(parent)s::text AND child_index = ANY(%(indexes)s::integer[]) AND NOT awaited
ORDER BY depth DESC, id
FOR UPDATE;

-- name: trigger_children
-- The parent's running attempt, fenced and locked: a resume decided by a child's end waits
-- for this trigger to commit, then sees the parent waiting (and the children it wrote).
SELECT id, attempt, queue, partition_key, tags, parent_id, root_id, depth, awaited, cancel_requested, status,
       started_at IS NULL AS unstarted
FROM tidegate_runs
WHERE id = %(id)s::text AND attempt = %(attempt)s::integer AND status = 'running' AND worker_id = %(worker)s::text
FOR UPDATE;

-- name: trigger_children_started
-- The attempt's start, when no turn of its worker recorded it yet (the claim unset started_at):
-- recorded with the trigger, whose RunStarted goes first among its events; a start the worker
-- reports later finds it set and adds nothing (cycle_reports).
UPDATE tidegate_runs SET started_at = tidegate_now()
WHERE id = %(id)s::text AND attempt = %(attempt)s::integer AND started_at IS NULL;

-- name: trigger_children_insert
INSERT INTO tidegate_runs (
    id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at,
    parent_id, root_id, depth, child_index, awaited, on_parent_cancel, trace_context)
SELECT r.id, r.task, r.queue, r.partition_key, r.rate_key, r.rate_cost, 'queued', r.priority, r.args, r.tags, r.concurrency_key, 0,
       r.max_attempts, r.retry_backoff, r.timeout, tidegate_now(), tidegate_now(),
       tidegate_now() + make_interval(secs => r.delay),
       tidegate_now() + make_interval(secs => r.deadline),
       %(parent)s::text, %(root)s::text, %(depth)s::integer, r.child_index, r.awaited, r.on_parent_cancel,
       r.trace_context
FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
    n integer, id text, task text, queue text, partition_key text, rate_key text, rate_cost integer, priority integer, args jsonb,
    tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
    timeout double precision, delay double precision, deadline double precision,
    child_index integer, awaited boolean, on_parent_cancel text, trace_context text)
ORDER BY r.n;

-- name: trigger_children_events
-- The trigger's events (the parent's RunStarted if it records the start, RunQueued of each child,
-- ChildTriggered and RunWaiting of the parent), in order.
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT e.run_id, NULL, e.type, e.metadata, tidegate_now()
FROM jsonb_to_recordset(%(events)s::jsonb) AS e(n integer, run_id text, type text, metadata jsonb)
ORDER BY e.n;

-- name: trigger_children_awaited
-- A child stored by a fire-and-forget trigger, now awaited by a replay that waits for it.
UPDATE tidegate_runs SET awaited = true
WHERE parent_id = %(parent)s::text AND child_index = ANY(%(indexes)s::integer[]);

-- name: trigger_children_awaited_links
-- The same for a linked child (a unique child's holder, storage/shared/child_links.py). The end
-- of the holder finds the link committed before (an earlier attempt wrote it), so its
-- resume_parents_lock waits on the parent's row this trigger holds.
UPDATE tidegate_child_links SET awaited = true
WHERE parent_id = %(parent)s::text AND child_index = ANY(%(indexes)s::integer[]);

-- name: trigger_children_lock_holders
-- The runs named by the keys of a trigger's unique children (whether they hold them or not: the
-- next statement decides) and the parent, locked in one statement, deeper first then by id (the
-- module's lock order; a holder may sit anywhere in a tree, or in none). Sent after `unique_lock`,
-- so the key rows it reads stay as they are. A holder's end, which updates it, waits for this
-- trigger, then finds the link (resume_parents_lock); a claim passes a locked holder over (SKIP
-- LOCKED) until the trigger commits. count(*) reads every locked row: a lock is taken only on a
-- row the statement returns.
SELECT count(*) FROM (
    SELECT r.id FROM tidegate_runs AS r
    WHERE r.id IN (SELECT run_id FROM tidegate_unique_keys WHERE key = ANY(%(keys)s::text[])) OR r.id = %(parent)s::text
    ORDER BY r.depth DESC, r.id
    FOR UPDATE
) AS locked;

-- name: trigger_children_holders
-- The runs holding the keys (unique.sql's `unique_holders` rule), with what the parent learns of a
-- linked child and what a wait on it decides its scopes by: read after trigger_children_lock_holders,
-- a statement of its own, so it sees every end of a holder that committed before the locks
-- (a failed or canceled run holds no key).
SELECT k.key, r.id, r.status, r.queue, r.partition_key, r.tags, r.result, r.error
FROM tidegate_unique_keys AS k
JOIN tidegate_runs AS r ON r.id = k.run_id
WHERE k.key = ANY(%(keys)s::text[])
  AND (position('|' || r.status || '|' in k.holds) > 0
       OR (r.status = 'completed' AND k.expires_at > tidegate_now()));

-- name: trigger_children_link
-- The positions of the parent answered by their keys' holders: no run stored, each holder linked.
INSERT INTO tidegate_child_links (parent_id, child_index, run_id, task, args, awaited)
SELECT %(parent)s::text, l.child_index, l.run_id, l.task, l.args, l.awaited
FROM jsonb_to_recordset(%(links)s::jsonb) AS l(child_index integer, run_id text, task text, args jsonb, awaited boolean);

-- name: trigger_children_chain
-- The runs above the parent, nearest first (each with what `waiting.ancestors` reads).
WITH RECURSIVE up(id, parent_id, status, awaited, wait_kept, wait_released, hops) AS (
    SELECT id, parent_id, status, awaited, wait_kept, wait_released, 0 FROM tidegate_runs WHERE id = %(id)s::text
    UNION ALL
    SELECT r.id, r.parent_id, r.status, r.awaited, r.wait_kept, r.wait_released, up.hops + 1
    FROM tidegate_runs AS r JOIN up ON r.id = up.parent_id
    WHERE up.hops < 10000
)
SELECT id, parent_id, status, awaited, wait_kept, wait_released FROM up WHERE hops > 0 ORDER BY hops;

-- name: trigger_children_held
-- The scopes the parent holds itself (0030_run_scopes.sql; its steps hold theirs as holder rows).
SELECT scope FROM tidegate_slot_holders WHERE run_id = %(id)s::text AND holder = %(id)s::text;

-- name: trigger_children_keepers
-- Whether some waiting run keeps a slot, read under the waits lock: while none does, no scope is
-- held by a run that cannot go on, so a wait that keeps nothing needs no check of the wait graph
-- (no keeper can commit before it: a keeping wait takes that lock exclusive).
SELECT EXISTS (SELECT 1 FROM tidegate_runs WHERE status = 'waiting' AND wait_kept <> '[]'::jsonb);

-- name: trigger_children_wait
-- The attempt ends waiting: no worker, no lease. A wait is not an attempt: max_attempts grows by
-- one as the next claim's attempt does (the hand-back's rule, domain.integers.grown), so the
-- budget is untouched.
UPDATE tidegate_runs SET
    status = 'waiting', worker_id = NULL, lease_expires_at = NULL,
    max_attempts = least(max_attempts, %(most_attempts)s::integer - 1) + 1, child_waits = child_waits + 1,
    wait_kept = %(kept)s::jsonb, wait_released = %(released)s::jsonb, wait_remaining = %(remaining)s::integer,
    waiting_since = tidegate_now()
WHERE id = %(id)s::text AND attempt = %(attempt)s::integer AND status = 'running';

-- name: trigger_children_release
-- Released slots (and every step slot of the run) go at once; kept ones stay, no longer leased
-- by a worker: they last until the run resumes or ends (the sweep knows waiting runs hold them).
DELETE FROM tidegate_holders WHERE run_id = %(id)s::text AND NOT (scope = ANY(%(kept)s::text[]));

-- name: trigger_children_keep
UPDATE tidegate_holders SET worker_id = NULL, expires_at = '9999-12-31 00:00:00+00'::timestamptz
WHERE run_id = %(id)s::text;

-- name: trigger_children_blocked
-- The blocked runs a wait may deadlock with (domain/wait_graph.py), read with the wait applied:
-- every waiting run, and every queued child some waiting run awaits. None while no waiting run
-- keeps a slot: then no scope is held by a run that cannot go on, and no wait can deadlock
-- (the common case, read by one probe of the waiting runs).
-- A wait on a linked child (:every) is always checked: it may close a circle of waits with no
-- slot at stake (WaitCycle). Linked children come once per linking parent (parent_id: that parent).
WITH keepers AS (
    SELECT 1 AS any_kept FROM tidegate_runs WHERE status = 'waiting' AND wait_kept <> '[]'::jsonb LIMIT 1
), asked AS (
    SELECT 1 AS asked WHERE %(every)s::boolean OR EXISTS (SELECT 1 FROM keepers)
)
SELECT r.id, r.status, r.queue, r.partition_key, r.tags, r.wait_kept, r.parent_id, r.awaited
FROM tidegate_runs AS r WHERE r.status = 'waiting' AND EXISTS (SELECT 1 FROM asked)
UNION ALL
SELECT c.id, c.status, c.queue, c.partition_key, c.tags, c.wait_kept, c.parent_id, c.awaited
FROM tidegate_runs AS w JOIN tidegate_runs AS c ON c.parent_id = w.id
WHERE w.status = 'waiting' AND c.status = 'queued' AND c.awaited = true AND EXISTS (SELECT 1 FROM asked)
UNION ALL
SELECT c.id, c.status, c.queue, c.partition_key, c.tags, c.wait_kept, l.parent_id, l.awaited
FROM tidegate_child_links AS l
JOIN tidegate_runs AS w ON w.id = l.parent_id
JOIN tidegate_runs AS c ON c.id = l.run_id
WHERE w.status = 'waiting' AND l.awaited AND c.status IN ('queued', 'waiting') AND EXISTS (SELECT 1 FROM asked);

-- name: run_children
-- With each child's shape (partition, tags): what a wait on it decides its scopes by. Linked
-- children (storage/shared/child_links.py) with the parent's call (task, args) and the holder's
-- run (id, status, outcome).
SELECT id, child_index, task, queue, partition_key, tags, args, status, awaited, result, error, false AS linked
FROM tidegate_runs WHERE parent_id = %(parent)s::text
UNION ALL
SELECT r.id, l.child_index, l.task, r.queue, r.partition_key, r.tags, l.args, r.status, l.awaited, r.result, r.error,
       true AS linked
FROM tidegate_child_links AS l JOIN tidegate_runs AS r ON r.id = l.run_id
WHERE l.parent_id = %(parent)s::text
ORDER BY child_index;

-- name: resume_parents_lock
-- The parents of runs that just ended, locked (whatever their status) before resume_parents
-- reads their children: a trigger that is making one wait holds this lock until it commits, so
-- either it sees this end, or this statement's successor sees it waiting. Locked after the
-- children (their ends came first in this transaction): the lock order of children.py's docstring.
-- The parents linked to them (a unique child's holder) are locked alike.
SELECT p.id FROM tidegate_runs AS p
WHERE p.id IN (SELECT r.parent_id FROM tidegate_runs AS r WHERE r.id = ANY(%(ids)s::text[]) AND r.parent_id IS NOT NULL)
   OR p.id IN (SELECT l.parent_id FROM tidegate_child_links AS l WHERE l.run_id = ANY(%(ids)s::text[]))
ORDER BY p.depth DESC, p.id
FOR UPDATE;

-- name: resume_parents
-- Waiting parents (of the runs :ids, or every waiting run when :ids is NULL: the sweep's
-- backstop) with at most `wait_remaining` awaited children unfinished (NULL: none; a wait on
-- any child: one fewer than when it began to wait): back to the queue ahead of its other runs (`resumed`, which leads the claim order; scheduled_at kept), with no dispatch
-- deadline any more (they were dispatched once); their kept slots go (they take their slots
-- again by claiming), with a RunResumed event (domain.events.run_resumed).
-- `ready` locks them deeper first, then by id (children.py's lock order): the backstop resumes
-- parents of any depth in one statement. A row it waited for is checked again once locked (READ
-- COMMITTED), so the update needs no condition of its own. A cycle's parents are locked already
-- (resume_parents_lock).
WITH ready AS (
    SELECT w.id FROM tidegate_runs AS w
    WHERE w.status = 'waiting'
      AND (%(ids)s::text[] IS NULL
           OR w.id IN (SELECT r.parent_id FROM tidegate_runs AS r
                       WHERE r.id = ANY(%(ids)s::text[]) AND r.parent_id IS NOT NULL)
           OR w.id IN (SELECT l.parent_id FROM tidegate_child_links AS l WHERE l.run_id = ANY(%(ids)s::text[])))
      -- its awaited children unfinished, its own and those linked to it (child_links.py)
      AND (SELECT count(*) FROM tidegate_runs AS c
           WHERE c.parent_id = w.id AND c.awaited AND c.status NOT IN ('completed', 'failed', 'canceled'))
          + (SELECT count(*) FROM tidegate_child_links AS l JOIN tidegate_runs AS c ON c.id = l.run_id
             WHERE l.parent_id = w.id AND l.awaited AND c.status NOT IN ('completed', 'failed', 'canceled'))
          <= greatest(coalesce(w.wait_remaining, 0), 0)
    ORDER BY w.depth DESC, w.id
    FOR UPDATE
), resumed AS (
    UPDATE tidegate_runs AS p SET
        status = 'queued', queued_at = tidegate_now(), wait_kept = NULL, wait_released = NULL,
        wait_remaining = NULL, deadline_at = NULL, block_reason = NULL, resumed = true
    FROM ready WHERE p.id = ready.id
    RETURNING p.id, p.waiting_since
), freed AS (
    DELETE FROM tidegate_holders WHERE run_id IN (SELECT id FROM resumed)
), logged AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunResumed',
           jsonb_build_object('waited', round(extract(epoch FROM tidegate_now() - waiting_since)::numeric, 3)),
           tidegate_now()
    FROM resumed
)
SELECT id FROM resumed;

-- name: cancel_run_tree
-- The run and its unfinished descendants linked to cancel with it (`abandon` children, and
-- what is below them, are kept).
WITH RECURSIVE tree(id, parent_id) AS (
    SELECT id, parent_id FROM tidegate_runs WHERE id = %(id)s::text
    UNION ALL
    SELECT r.id, r.parent_id FROM tidegate_runs AS r JOIN tree ON r.parent_id = tree.id
    WHERE r.on_parent_cancel = 'cancel' AND r.status NOT IN ('completed', 'failed', 'canceled')
)
SELECT id, parent_id FROM tree;

-- name: cancel_run_tree_lock
-- Children before parents, deeper first: the lock order of children.py's docstring.
SELECT id FROM tidegate_runs WHERE id = ANY(%(ids)s::text[]) ORDER BY depth DESC, id FOR UPDATE;

-- name: cancel_run_tree_queued
UPDATE tidegate_runs SET status = 'canceled', finished_at = tidegate_now()
WHERE id = ANY(%(ids)s::text[]) AND status = 'queued'
RETURNING id;

-- name: cancel_run_waiting
UPDATE tidegate_runs SET status = 'canceled', finished_at = tidegate_now(), wait_kept = NULL, wait_released = NULL
WHERE id = ANY(%(ids)s::text[]) AND status = 'waiting'
RETURNING id;

-- name: cancel_run_waiting_holders
DELETE FROM tidegate_holders WHERE run_id = ANY(%(ids)s::text[]);

-- name: cancel_run_requested
-- The worker running each learns this in its next cycle and ends the attempt.
UPDATE tidegate_runs SET cancel_requested = true WHERE id = ANY(%(ids)s::text[]) AND status = 'running';
