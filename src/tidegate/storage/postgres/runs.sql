-- PostgreSQL queries of runs.py: task definitions, submits (admission), cancels, reads of runs and events.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_tasks
-- A worker registering (worker_id set) is remembered with the time; a submitter or server
-- registering leaves the last worker as it was.
INSERT INTO tidegate_tasks (
    name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
    unique_rule, rate_cost, worker_id, worker_seen_at, updated_at)
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
       unique_rule, rate_cost, worker_id, CASE WHEN worker_id IS NULL THEN NULL ELSE tidegate_now() END, tidegate_now()
FROM jsonb_to_recordset(%(tasks)s::jsonb) AS t(
    name text, queue text, priority integer, tags jsonb, max_attempts integer,
    retry_backoff double precision, timeout double precision, dispatch_deadline double precision,
    parameters jsonb, unique_rule jsonb, rate_cost integer, worker_id text)
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
FROM tidegate_tasks WHERE name = %(name)s::text;

-- name: list_tasks
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, parameters,
       unique_rule, rate_cost, worker_id, worker_seen_at, updated_at
FROM tidegate_tasks ORDER BY name;

-- name: enqueue_fence
-- The rules fence, shared (as claims take it): the admission ceilings read
-- by enqueue_lock and enqueue stay those in force until this submit commits.
SELECT pg_advisory_xact_lock_shared(hashtext('tidegate:rules'), hashtext(coalesce(current_schema(), '')));

-- name: enqueue_lock
-- One submitter at a time per admission ceiling this batch meets (`admission:*`
-- for the global max_active, `admission:QUEUE` for a queue's), locks taken in
-- key order so that two submitters never wait on each other in a circle. Only
-- the next statement counts: under READ COMMITTED it sees every submit that
-- committed before the lock was granted, so two can never take the last place.
-- A batch that meets no ceiling takes no lock and submits in parallel.
SELECT pg_advisory_xact_lock(hashtextextended('tidegate:' || coalesce(current_schema(), '') || '/' || c.key, 0))
FROM (
    SELECT key FROM (
        SELECT 'admission:*' AS key FROM tidegate_settings
        WHERE name = 'run_queue' AND (value::jsonb ->> 'max_active') IS NOT NULL
        UNION ALL
        SELECT 'admission:' || name FROM tidegate_queues
        WHERE name = ANY(%(queues)s::text[]) AND (config ->> 'max_active') IS NOT NULL
    ) AS u
    ORDER BY key COLLATE "C"
) AS c;

-- name: enqueue
-- Runs and their RunQueued events, all or none, in submission order; none if
-- the batch would push the active runs (queued + running) of a ceiling past
-- it (`max_active` of the declarations, as domain.transitions.ceilings_met and
-- Ceiling.refuses decide; pinned by tests/contract/test_transitions_pinned.py).
-- Then the one ceiling refused, in the order SQLite checks them (all queues,
-- then queues as they first appear), with its count and what the batch adds:
-- the adapter raises with them (and the ceiling's pace, read then: activity.sql's run_pace).
WITH new AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
        n integer, id text, task text, queue text, partition_key text, rate_key text, rate_cost integer, priority integer, args jsonb,
        tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
        timeout double precision, delay double precision, deadline double precision, trace_context text)
), ceilings AS (
    SELECT NULL::text AS queue, (s.value::jsonb ->> 'max_active')::integer AS ceiling,
           (SELECT count(*)::integer FROM new) AS incoming, -1 AS first
    FROM tidegate_settings AS s
    WHERE s.name = 'run_queue' AND (s.value::jsonb ->> 'max_active') IS NOT NULL
    UNION ALL
    SELECT q.name, (q.config ->> 'max_active')::integer, b.incoming, b.first
    FROM (SELECT queue, count(*)::integer AS incoming, min(n) AS first FROM new GROUP BY queue) AS b
    JOIN tidegate_queues AS q ON q.name = b.queue
    WHERE (q.config ->> 'max_active') IS NOT NULL
), refused AS (
    SELECT c.queue, c.ceiling, c.incoming, a.active
    FROM ceilings AS c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN c.queue IS NULL
                    THEN (SELECT count(*)::integer FROM tidegate_runs WHERE status IN ('queued', 'running', 'waiting'))
                    ELSE (SELECT count(*)::integer FROM tidegate_runs
                          WHERE status IN ('queued', 'running', 'waiting') AND queue = c.queue)
               END AS active
    ) AS a
    WHERE a.active + c.incoming > c.ceiling
    ORDER BY c.first
    LIMIT 1
), stored AS (
    INSERT INTO tidegate_runs (
        id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt,
        max_attempts, retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at, trace_context)
    SELECT id, task, queue, partition_key, rate_key, rate_cost, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
           retry_backoff, timeout, tidegate_now(), tidegate_now(), tidegate_now() + make_interval(secs => delay),
           tidegate_now() + make_interval(secs => deadline), trace_context
    FROM new WHERE NOT EXISTS (SELECT 1 FROM refused) ORDER BY n
), queued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), tidegate_now()
    FROM new WHERE NOT EXISTS (SELECT 1 FROM refused) ORDER BY n
), woken AS (
    -- The wake-up (the notify block's), delivered at commit; a refused batch stored nothing:
    -- a spare wake-up at worst. Read once below whatever was refused, so that it always runs.
    SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) AS sent
)
SELECT f.queue, f.active, f.ceiling, f.incoming
FROM woken AS w
LEFT JOIN refused AS f ON true
WHERE f.ceiling IS NOT NULL;

-- name: enqueue_ceilings
-- The rules version, and the admission ceilings in force under it: whether the global one is set
-- and the queues that have one. A batch that meets none of them, while the version is still
-- this one, needs neither enqueue_lock nor the count: enqueue_free. Read after the fence, so
-- the version cannot move before this submit commits.
SELECT v.value,
       EXISTS (SELECT 1 FROM tidegate_settings
               WHERE name = 'run_queue' AND (value::jsonb ->> 'max_active') IS NOT NULL),
       ARRAY(SELECT name FROM tidegate_queues WHERE (config ->> 'max_active') IS NOT NULL ORDER BY name)
FROM tidegate_settings AS v WHERE v.name = 'rules_version';

-- name: enqueue_free
-- `enqueue` for a batch that meets no admission ceiling under the rules version `known`
-- (as enqueue_ceilings read it): no lock, no count, and one statement, its own transaction.
-- It stores the runs, their RunQueued events and the wake-up only while the version is still
-- `known`. The version row is read FOR SHARE, which does both jobs of the rules fence at once:
-- under READ COMMITTED a locking read returns the row's latest committed version, not the one
-- of the statement's snapshot (a change committed after the snapshot was taken is seen; one in
-- flight is waited for), and the lock keeps every change of the rules (each moves the version
-- in its own transaction) from committing before this submit does. So a ceiling set since
-- `known` was read is never submitted past. Its one row says whether it stored anything (if
-- not, the adapter submits again the full way). The statement is the body of
-- tidegate_enqueue_free (migrations/0027): planned once per server session, also through a
-- transaction-mode pooler, where nothing is prepared; the clock is the caller's.
SELECT tidegate_enqueue_free(%(runs)s::jsonb, %(known)s::text, tidegate_now());

-- name: run_status
SELECT status FROM tidegate_runs WHERE id = %(id)s::text;

-- name: pending_count
-- A waiting parent is pending too: it comes back to its queue once its children end.
SELECT count(*) FROM tidegate_runs
WHERE status IN ('queued', 'running', 'waiting') AND queue = ANY(%(queues)s::text[]);

-- name: get_run
-- Columns are named, not *, so a later migration that adds one cannot break
-- the statements other processes have prepared ("cached plan must not change
-- result type").
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect, resumed, parent_id, root_id, depth, wait_released, wait_kept,
       wait_remaining, child_waits, worker_shutdowns, lost_workers, manual_retries, rate_key, snoozes
FROM tidegate_runs WHERE id = %(id)s::text;

-- name: run_events
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_event_log
WHERE run_id = %(run_id)s::text ORDER BY id;

-- name: status_counts
SELECT status, count(*) FROM tidegate_runs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY status;

-- name: list_queued
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect, resumed,
       child_waits, worker_shutdowns, lost_workers, manual_retries, rate_key, snoozes
FROM tidegate_runs
WHERE status = 'queued' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT %(limit)s::integer;

-- name: queue_position
-- (runs ahead of it in its queue's claim order, runs queued in that queue); no row: no such run.
SELECT
    (SELECT count(*)::integer FROM tidegate_runs AS o
     WHERE o.status = 'queued' AND o.queue = r.queue
       AND (o.resumed > r.resumed OR (o.resumed = r.resumed
            AND (o.priority > r.priority OR (o.priority = r.priority
                 AND (o.scheduled_at < r.scheduled_at OR (o.scheduled_at = r.scheduled_at AND o.id < r.id))))))),
    (SELECT count(*)::integer FROM tidegate_runs AS o WHERE o.status = 'queued' AND o.queue = r.queue)
FROM tidegate_runs AS r WHERE r.id = %(id)s::text;

-- name: enqueue_active
-- The active runs (queued, running, waiting) of one admission ceiling
-- (:queue NULL: all queues), counted by a trigger or an operator's retry once it holds the
-- ceiling's lock (enqueue_lock; storage/postgres/admission.py); a submit counts in `enqueue`.
SELECT count(*)::integer FROM tidegate_runs
WHERE status IN ('queued', 'running', 'waiting') AND (%(queue)s::text IS NULL OR queue = %(queue)s::text);
