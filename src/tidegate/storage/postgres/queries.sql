-- PostgreSQL queries, one block per port verb (or `verb_step` for a step of one).
-- Parameters are named (%(name)s) and always cast, so a prepared statement
-- keeps one plan whatever Python type arrives. Every time is the server's
-- now(), the one clock all workers share. Batches arrive as arrays (unnest)
-- or as one JSON document (jsonb_to_recordset), so a batch is one statement.
-- Table names are unqualified: the connection's search_path picks the schema.
-- Steps that write runs also write their events in the same statement, so a
-- verb's statements can be pipelined without waiting on each other's rows.

-- name: migrate_lock
-- Workers starting together all try to migrate; one at a time per schema.
SELECT pg_advisory_xact_lock(hashtext('tidegate:migrate'), hashtext(coalesce(current_schema(), '')));

-- name: migrate_version_table
CREATE TABLE IF NOT EXISTS tidegate_schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version_exists
SELECT to_regclass('tidegate_schema_version') IS NOT NULL;

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at)
VALUES (%(version)s::integer, %(name)s::text, now());

-- name: register_tasks
INSERT INTO tidegate_tasks (name, queue, priority, tags, max_attempts, retry_backoff, timeout, updated_at)
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, now()
FROM jsonb_to_recordset(%(tasks)s::jsonb) AS t(
    name text, queue text, priority integer, tags jsonb, max_attempts integer,
    retry_backoff double precision, timeout double precision)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout
FROM tidegate_tasks WHERE name = %(name)s::text;

-- name: enqueue
-- Runs and their RunQueued events, all or none, in submission order.
WITH new AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
        n integer, id text, task text, queue text, priority integer, args jsonb, tags jsonb,
        concurrency_key text, max_attempts integer, retry_backoff double precision,
        timeout double precision, delay double precision)
), stored AS (
    INSERT INTO tidegate_runs (
        id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts,
        retry_backoff, timeout, submitted_at, queued_at, scheduled_at)
    SELECT id, task, queue, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
           retry_backoff, timeout, now(), now(), now() + make_interval(secs => delay)
    FROM new ORDER BY n
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), now()
FROM new ORDER BY n;

-- name: notify
-- Delivered at commit, once per transaction however often it is called.
SELECT pg_notify('tidegate', '');

-- name: listen
LISTEN tidegate;

-- name: cycle_reports
-- The starts and outcomes of one cycle, in one statement: a short attempt
-- often reports both at once, and one UPDATE then writes its row once.
-- Fenced on (id, attempt, running, worker): a report about an attempt that
-- was taken over matches no row; an outcome not returned is fenced out.
-- The event type and metadata of each outcome come computed by the adapter.
-- The rows are locked in id order before they are written, as in every verb
-- that writes several of a worker's attempts (renew_leases, hand_back): so
-- two such transactions (a worker's cycle, its lease renewal) never wait on
-- each other in a circle. Claims and the sweep never wait (SKIP LOCKED).
WITH starts AS (
    SELECT * FROM unnest(%(start_ids)s::text[], %(start_attempts)s::integer[]) WITH ORDINALITY AS s(id, attempt, n)
), outcomes AS (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(
        n integer, id text, attempt integer, status text, result jsonb, error text,
        delay double precision, event text, metadata jsonb)
), reports AS (
    SELECT coalesce(o.id, s.id) AS id, coalesce(o.attempt, s.attempt) AS attempt,
           s.n AS start_n, o.n AS outcome_n, o.status, o.result, o.error, o.delay, o.event, o.metadata
    FROM starts AS s FULL JOIN outcomes AS o ON o.id = s.id AND o.attempt = s.attempt
), locked AS (
    SELECT id FROM tidegate_runs
    WHERE id IN (SELECT id FROM reports) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY id
    FOR UPDATE
), applied AS (
    UPDATE tidegate_runs AS r SET
        started_at = CASE WHEN p.start_n IS NULL THEN r.started_at ELSE now() END,
        -- A run whose cancel was requested ends canceled unless it completed.
        status = CASE WHEN p.outcome_n IS NOT NULL AND r.cancel_requested AND p.status IN ('queued', 'failed')
                      THEN 'canceled' ELSE coalesce(p.status, r.status) END,
        result = CASE WHEN p.outcome_n IS NULL THEN r.result ELSE p.result END,
        error = CASE WHEN p.outcome_n IS NULL THEN r.error ELSE p.error END,
        finished_at = CASE WHEN p.outcome_n IS NULL THEN r.finished_at
                           WHEN p.status = 'queued' AND NOT r.cancel_requested THEN NULL
                           ELSE now() END,
        queued_at = CASE WHEN p.status = 'queued' AND NOT r.cancel_requested THEN now() ELSE r.queued_at END,
        scheduled_at = CASE WHEN p.status = 'queued' AND NOT r.cancel_requested
                            THEN now() + make_interval(secs => coalesce(p.delay, 0))
                            ELSE r.scheduled_at END,
        worker_id = CASE WHEN p.outcome_n IS NULL THEN r.worker_id END,
        lease_expires_at = CASE WHEN p.outcome_n IS NULL THEN r.lease_expires_at END,
        cancel_requested = CASE WHEN p.outcome_n IS NULL THEN r.cancel_requested ELSE false END
    FROM reports AS p, locked AS l
    WHERE r.id = p.id AND l.id = p.id AND r.attempt = p.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING r.id, r.attempt, r.status, p.start_n, p.outcome_n, p.event, p.metadata
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, type, metadata, now()
    FROM (
        SELECT id, 'RunStarted' AS type,
               jsonb_build_object('attempt', attempt, 'worker', %(worker)s::text) AS metadata,
               0 AS part, start_n AS n
        FROM applied WHERE start_n IS NOT NULL
        UNION ALL
        SELECT id, CASE WHEN status = 'canceled' THEN 'RunCanceled' ELSE event END,
               CASE WHEN status = 'canceled' THEN metadata - 'retry_in' ELSE metadata END, 1, outcome_n
        FROM applied WHERE outcome_n IS NOT NULL
    ) AS e
    ORDER BY part, n
)
SELECT id, attempt FROM applied WHERE outcome_n IS NOT NULL;

-- name: cancel_requests
SELECT id, attempt FROM tidegate_runs
WHERE worker_id = %(worker)s::text AND status = 'running' AND cancel_requested;

-- name: claim_candidates
-- The best due runs of each queue, locked; rows another claimer holds are
-- skipped, not waited on. One index walk per queue (queue leads the claim
-- index), merged here: `queue = ANY(...)` would sort every due run instead.
-- With several queues up to `limit` rows per queue are locked until commit.
SELECT c.id
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT id, priority, scheduled_at FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name AND scheduled_at <= now()
    ORDER BY priority DESC, scheduled_at, id
    LIMIT %(limit)s::integer
    FOR UPDATE SKIP LOCKED
) AS c
ORDER BY c.priority DESC, c.scheduled_at, c.id
LIMIT %(limit)s::integer;

-- name: claim_runs
-- Claims the locked candidates, in candidate order, with their RunDequeued events.
WITH claimed AS (
    UPDATE tidegate_runs AS r SET
        status = 'running', attempt = r.attempt + 1, worker_id = %(worker)s::text,
        lease_expires_at = now() + make_interval(secs => %(lease)s::double precision),
        started_at = NULL
    FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS c(id, n)
    WHERE r.id = c.id AND r.status = 'queued'
    RETURNING c.n, r.id, r.task, r.queue, r.args, r.attempt, r.max_attempts, r.retry_backoff, r.timeout
), dequeued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunDequeued', jsonb_build_object('attempt', attempt, 'worker', %(worker)s::text), now()
    FROM claimed ORDER BY n
)
SELECT id, task, queue, args, attempt, max_attempts, retry_backoff, timeout
FROM claimed ORDER BY n;

-- name: next_due
-- Seconds until the earliest queued run falls due (one index probe per queue).
SELECT extract(epoch FROM min(d.scheduled_at) - now())::double precision
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT scheduled_at FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name
    ORDER BY scheduled_at
    LIMIT 1
) AS d;

-- name: renew_leases
-- Only the server's clock sets a lease, so a just-renewed lease is never reaped.
-- Locks in id order first, like cycle_reports.
WITH locked AS (
    SELECT id FROM tidegate_runs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY id
    FOR UPDATE
)
UPDATE tidegate_runs AS r SET lease_expires_at = now() + make_interval(secs => %(lease)s::double precision)
FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) AS f(id, attempt), locked AS l
WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
  AND r.status = 'running' AND r.worker_id = %(worker)s::text
RETURNING r.id, r.attempt;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong. A run whose cancel was asked ends canceled.
-- Locks in id order first, like cycle_reports.
WITH locked AS (
    SELECT id FROM tidegate_runs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY id
    FOR UPDATE
), back AS (
    UPDATE tidegate_runs AS r SET
        status = CASE WHEN r.cancel_requested THEN 'canceled' ELSE 'queued' END,
        finished_at = CASE WHEN r.cancel_requested THEN now() ELSE NULL END,
        max_attempts = r.max_attempts + 1,
        queued_at = now(), scheduled_at = now(), worker_id = NULL, lease_expires_at = NULL
    FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) WITH ORDINALITY AS f(id, attempt, n), locked AS l
    WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING f.n, r.id, r.attempt, r.status
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL,
           CASE WHEN status = 'queued' THEN 'RunRequeued' ELSE 'RunCanceled' END,
           jsonb_build_object('attempt', attempt, 'reason', %(reason)s::text, 'worker', %(worker)s::text),
           now()
    FROM back ORDER BY n
)
SELECT id FROM back ORDER BY n;

-- name: take_lock
-- The turn is free when it expired, or already ours (then it is extended).
INSERT INTO tidegate_locks (name, holder, expires_at)
VALUES (%(name)s::text, %(holder)s::text, now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < now() OR tidegate_locks.holder = excluded.holder
RETURNING holder;

-- name: sweep_recover
-- Rescue counts as an attempt: a run that keeps killing its worker ends failed.
-- The expired rows are locked first so the worker id reported is the one
-- whose lease lapsed; a row some transaction holds (a renewal, an outcome)
-- is skipped, not waited on, and swept next time if it is still expired.
WITH expired AS (
    SELECT id, worker_id FROM tidegate_runs
    WHERE status = 'running' AND lease_expires_at < now()
    FOR UPDATE SKIP LOCKED
), recovered AS (
    UPDATE tidegate_runs AS r SET
        status = CASE WHEN r.cancel_requested THEN 'canceled'
                      WHEN r.attempt >= r.max_attempts THEN 'failed'
                      ELSE 'queued' END,
        error = CASE WHEN r.cancel_requested THEN r.error
                     WHEN r.attempt >= r.max_attempts
                     THEN 'lease expired: the worker stopped renewing it (attempt '
                          || r.attempt || ' of ' || r.max_attempts || ')'
                     ELSE r.error END,
        finished_at = CASE WHEN r.cancel_requested OR r.attempt >= r.max_attempts THEN now() ELSE NULL END,
        queued_at = now(), scheduled_at = now(), worker_id = NULL, lease_expires_at = NULL
    FROM expired AS e
    WHERE r.id = e.id AND r.status = 'running' AND r.lease_expires_at < now()
    RETURNING r.id, r.attempt, r.status, e.worker_id
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL,
           CASE status WHEN 'queued' THEN 'RunRequeued' WHEN 'failed' THEN 'RunFailed' ELSE 'RunCanceled' END,
           jsonb_build_object('attempt', attempt, 'reason', %(reason)s::text, 'worker', worker_id),
           now()
    FROM recovered ORDER BY id
)
SELECT id, status FROM recovered ORDER BY id;

-- name: cancel_queued
WITH canceled AS (
    UPDATE tidegate_runs SET status = 'canceled', finished_at = now()
    WHERE id = %(id)s::text AND status = 'queued'
    RETURNING id
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT id, NULL, 'RunCanceled', jsonb_build_object('reason', %(reason)s::text), now()
FROM canceled;

-- name: request_cancel
-- The worker running it learns this in its next cycle and ends the attempt.
UPDATE tidegate_runs SET cancel_requested = true
WHERE id = %(id)s::text AND status = 'running';

-- name: run_status
SELECT status FROM tidegate_runs WHERE id = %(id)s::text;

-- name: pending_count
SELECT count(*) FROM tidegate_runs
WHERE status IN ('queued', 'running') AND queue = ANY(%(queues)s::text[]);

-- name: get_run
-- Columns are named, not *, so a later migration that adds one cannot break
-- the statements other processes have prepared ("cached plan must not change
-- result type").
SELECT id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error
FROM tidegate_runs WHERE id = %(id)s::text;

-- name: list_runs
SELECT id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error
FROM tidegate_runs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY id DESC
LIMIT %(limit)s::integer;

-- name: run_events
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_events
WHERE run_id = %(run_id)s::text ORDER BY id;

-- name: status_counts
SELECT status, count(*) FROM tidegate_runs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY status;
