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
INSERT INTO tidegate_tasks (
    name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, updated_at)
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, now()
FROM jsonb_to_recordset(%(tasks)s::jsonb) AS t(
    name text, queue text, priority integer, tags jsonb, max_attempts integer,
    retry_backoff double precision, timeout double precision, dispatch_deadline double precision)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, dispatch_deadline = excluded.dispatch_deadline, updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline
FROM tidegate_tasks WHERE name = %(name)s::text;

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
-- it (`max_active` of the declarations, as domain.scopes.Rules reads it).
-- Then the one ceiling refused, in the order SQLite checks them (all queues,
-- then queues as they first appear), with its count, what the batch adds and
-- the completions of the last `window` seconds: the adapter raises with them.
WITH new AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
        n integer, id text, task text, queue text, partition_key text, priority integer, args jsonb,
        tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
        timeout double precision, delay double precision, deadline double precision)
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
                    THEN (SELECT count(*)::integer FROM tidegate_runs WHERE status IN ('queued', 'running'))
                    ELSE (SELECT count(*)::integer FROM tidegate_runs
                          WHERE status IN ('queued', 'running') AND queue = c.queue)
               END AS active
    ) AS a
    WHERE a.active + c.incoming > c.ceiling
    ORDER BY c.first
    LIMIT 1
), stored AS (
    INSERT INTO tidegate_runs (
        id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
        retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at)
    SELECT id, task, queue, partition_key, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
           retry_backoff, timeout, now(), now(), now() + make_interval(secs => delay),
           now() + make_interval(secs => deadline)
    FROM new WHERE NOT EXISTS (SELECT 1 FROM refused) ORDER BY n
), queued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), now()
    FROM new WHERE NOT EXISTS (SELECT 1 FROM refused) ORDER BY n
)
SELECT f.queue, f.active, f.ceiling, f.incoming,
       (SELECT count(*)::integer FROM tidegate_runs AS r
        WHERE r.finished_at >= now() - make_interval(secs => %(window)s::double precision)
          AND r.status IN ('completed', 'failed', 'canceled') AND (f.queue IS NULL OR r.queue = f.queue))
FROM refused AS f;

-- name: notify
-- Delivered at commit, once per transaction however often it is called. One
-- channel per schema (channel names are at most 63 bytes, so a digest of it):
-- two tidegate databases in one PostgreSQL database never wake each other.
SELECT pg_notify('tidegate_' || md5(current_schema()), '');

-- name: listen_channel
SELECT 'tidegate_' || md5(current_schema());

-- name: cycle_reports
-- The starts and outcomes of one cycle, in one statement: a short attempt
-- often reports both at once, and one UPDATE then writes its row once.
-- Fenced on (id, attempt, running, worker): a report about an attempt that
-- was taken over matches no row; an outcome not returned is fenced out.
-- The event type and metadata of each outcome come computed by the adapter.
-- An attempt that ended releases its scopes (deletes its holder rows) here,
-- in the same statement as its status change, so no slot can outlive it.
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
        cancel_requested = CASE WHEN p.outcome_n IS NULL THEN r.cancel_requested ELSE false END,
        -- A suspect whose attempt reported an outcome did not kill its worker: cleared.
        suspect = CASE WHEN p.outcome_n IS NULL THEN r.suspect ELSE false END
    FROM reports AS p, locked AS l
    WHERE r.id = p.id AND l.id = p.id AND r.attempt = p.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING r.id, r.attempt, r.status, p.start_n, p.outcome_n, p.event, p.metadata
), released AS (
    DELETE FROM tidegate_holders AS h USING applied AS a
    WHERE h.run_id = a.id AND a.outcome_n IS NOT NULL
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

-- name: claim_fence
-- Every claiming cycle takes this (shared) before it reads the rules, and every
-- change of the rules takes it exclusive (rules_fence): so the rules a claim
-- read stay in force until it commits, and once a lowered limit is set nobody
-- is admitted under the old one. It also turns enable_sort off for the rest of
-- the transaction, whose statements either need no sort or cannot avoid one:
-- each claim read then walks the index whose order it asks for, whatever the
-- statistics say. Without statistics (a table just filled) every partial index
-- looks empty, and the planner would take the smallest (the due index) and
-- sort the queue's whole backlog, once per partition head. (JIT is off on
-- every connection: the cost a disabled sort adds to a plan that cannot avoid
-- one would otherwise pass jit_above_cost and compile each statement.)
-- Claim statements stamp with statement_timestamp(), not now(): the time after
-- this fence and the scope locks were granted, so a claim that waited is never
-- stamped before the release it followed (now() is when the transaction began).
SELECT pg_advisory_xact_lock_shared(hashtext('tidegate:rules'), hashtext(coalesce(current_schema(), ''))),
       set_config('enable_sort', 'off', true);

-- name: claim_turn
-- One claimer at a time per queue that a limit applies to, or that is fair
-- (see _Claim._take_turns); held until commit. A 64-bit key, so two queues
-- practically never share one, and claimers take them in queue-name order.
SELECT pg_advisory_xact_lock(hashtextextended('tidegate:claim/' || coalesce(current_schema(), '') || '/' || %(queue)s::text, 0));

-- name: due_now
-- "Look again at once", as a next-due answer.
SELECT 0.0::double precision;

-- name: rules_fence
SELECT pg_advisory_xact_lock(hashtext('tidegate:rules'), hashtext(coalesce(current_schema(), '')));

-- name: claim_window
-- The first due runs of each queue in claim order, locked; rows another
-- claimer holds are skipped, not waited on. One walk of the claim index per
-- queue (queue leads it), each with its own size: `queue = ANY(...)` would sort
-- every due run instead; the cost is the window, not the backlog. Runs that
-- carry a tag of `excluded` (a list of {"key": "value"} objects: full tag
-- scopes) are left out. Tags are read only when some tag limit exists (`tags`):
-- otherwise no scope depends on them. Rows come grouped by queue, unsorted
-- across queues; every row read stays locked until commit.
SELECT c.id, c.task, c.queue, c.partition_key, c.tags, c.priority, c.scheduled_at, c.block_reason, c.suspect
FROM unnest(%(queues)s::text[], %(sizes)s::integer[]) AS q(name, size)
CROSS JOIN LATERAL (
    SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags END AS tags,
           priority, scheduled_at, block_reason, suspect FROM tidegate_runs AS r
    WHERE status = 'queued' AND queue = q.name AND scheduled_at <= statement_timestamp()
      AND (deadline_at IS NULL OR deadline_at > statement_timestamp())
      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
    ORDER BY priority DESC, scheduled_at, id
    LIMIT q.size
    FOR UPDATE SKIP LOCKED
) AS c;

-- name: claim_partitions
-- The distinct partitions with queued runs, by a loose index scan over the
-- partition index (a recursive CTE: one seek per partition, however many runs
-- each holds), each with its head in claim order, read and locked like the
-- window in the same statement: one run of a partition that is full
-- (`saturated`: so its block reason is recorded), enough of the others for
-- the claim limit taking turns. A partition with no run to show (all locked,
-- excluded or not yet due) still appears, with a NULL id. Unsorted: the
-- adapter groups the rows by partition.
WITH RECURSIVE parts(key) AS (
    (SELECT partition_key FROM tidegate_runs
     WHERE status = 'queued' AND queue = %(queue)s::text
     ORDER BY partition_key LIMIT 1)
    UNION ALL
    SELECT (SELECT r.partition_key FROM tidegate_runs AS r
            WHERE r.status = 'queued' AND r.queue = %(queue)s::text AND r.partition_key > p.key
            ORDER BY r.partition_key LIMIT 1)
    FROM parts AS p WHERE p.key IS NOT NULL
), found AS (
    SELECT key FROM parts WHERE key IS NOT NULL LIMIT %(limit)s::integer
), turns AS (
    -- As claiming._partition_heads: min(claim limit, ceil(claim limit / open partitions) + 1).
    SELECT least(%(claim_limit)s::integer,
                 ceil(%(claim_limit)s::numeric
                      / greatest(1, count(*) FILTER (WHERE NOT key = ANY(%(saturated)s::text[]))))::integer + 1)
           AS per_partition
    FROM found
)
SELECT f.key, t.per_partition, h.id, h.task, h.queue, h.partition_key, h.tags, h.priority, h.scheduled_at,
       h.block_reason, h.suspect
FROM found AS f
CROSS JOIN turns AS t
LEFT JOIN LATERAL (
    SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags END AS tags,
           priority, scheduled_at, block_reason, suspect FROM tidegate_runs AS r
    WHERE status = 'queued' AND queue = %(queue)s::text AND partition_key = f.key
      AND scheduled_at <= statement_timestamp() AND (deadline_at IS NULL OR deadline_at > statement_timestamp())
      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
    ORDER BY priority DESC, scheduled_at, id
    LIMIT CASE WHEN f.key = ANY(%(saturated)s::text[]) THEN 1 ELSE t.per_partition END
    FOR UPDATE SKIP LOCKED
) AS h ON true;

-- name: claim_partition_head
-- The head of one partition, when claim_partitions did not read what is asked.
SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags END AS tags,
       priority, scheduled_at, block_reason, suspect FROM tidegate_runs AS r
WHERE status = 'queued' AND queue = %(queue)s::text AND partition_key = %(partition)s::text
  AND scheduled_at <= statement_timestamp() AND (deadline_at IS NULL OR deadline_at > statement_timestamp())
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
ORDER BY priority DESC, scheduled_at, id
LIMIT %(limit)s::integer
FOR UPDATE SKIP LOCKED;

-- name: upsert_scopes
-- Lock rows for the scopes the candidates need, created on first use, in key
-- order (two claimers inserting the same new keys then wait in the same order).
INSERT INTO tidegate_scopes (key)
SELECT k.key FROM unnest(%(keys)s::text[]) AS k(key) ORDER BY k.key COLLATE "C"
ON CONFLICT (key) DO NOTHING;

-- name: lock_scopes
-- The scopes of every candidate, locked in key order (rows are locked after
-- the ordered index scan): claimers that share a scope queue up here instead of
-- both seeing its last free slot, and the common order rules out deadlocks.
-- Only the statements after this one read usage: under READ COMMITTED each
-- sees every claim committed before it, so the sum is exact while the lock is held.
-- Not redundant with the claim turns: those are per queue, and claimers of two
-- queues that share a scope (the global cap, a tag) meet nowhere else (their
-- holder rows differ by run, upsert_scopes waits only on a key not yet
-- committed). It is rarely seen under load only because a worker that frees a
-- slot takes it again in the same commit; tests/test_serialization.py forces it.
SELECT key FROM tidegate_scopes WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE;

-- name: scope_usage_of
SELECT scope, sum(slots)::integer FROM tidegate_holders
WHERE scope = ANY(%(keys)s::text[])
GROUP BY scope;

-- name: local_usage
SELECT queue, partition_key, count(*)::integer FROM tidegate_runs
WHERE worker_id = %(worker)s::text AND status = 'running'
GROUP BY queue, partition_key;

-- name: lane_load
-- Running runs per partition of fair queues: the least-served partition goes first.
SELECT queue, partition_key, count(*)::integer FROM tidegate_runs
WHERE status = 'running' AND queue = ANY(%(queues)s::text[])
GROUP BY queue, partition_key;

-- name: set_block_reasons
-- Only reasons that changed arrive here, each with its RunBlocked event.
WITH reasons AS (
    SELECT * FROM jsonb_to_recordset(%(reasons)s::jsonb) AS b(n integer, id text, reason jsonb)
), blocked AS (
    UPDATE tidegate_runs AS r SET block_reason = b.reason
    FROM reasons AS b
    WHERE r.id = b.id AND r.status = 'queued'
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT id, NULL, 'RunBlocked', jsonb_build_object('blocked_by', reason), statement_timestamp()
FROM reasons ORDER BY n;

-- name: claim_runs
-- Claims the admitted candidates (locked), in admission order, with their
-- RunDequeued events and one holder row per (scope, run), carrying the new
-- attempt and the lease expiry. A holder left behind by an earlier attempt
-- of the same run (a leak the sweep has not repaired yet) is taken over.
WITH claimed AS (
    UPDATE tidegate_runs AS r SET
        status = 'running', attempt = r.attempt + 1, worker_id = %(worker)s::text,
        lease_expires_at = statement_timestamp() + make_interval(secs => %(lease)s::double precision),
        started_at = NULL, block_reason = NULL
    FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS c(id, n)
    WHERE r.id = c.id AND r.status = 'queued'
    RETURNING c.n, r.id, r.task, r.queue, r.args, r.attempt, r.max_attempts, r.retry_backoff, r.timeout, r.suspect
), dequeued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunDequeued', jsonb_build_object('attempt', attempt, 'worker', %(worker)s::text),
           statement_timestamp()
    FROM claimed ORDER BY n
), held AS (
    INSERT INTO tidegate_holders AS t (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
    SELECT h.scope, c.id, c.id, c.attempt, %(worker)s::text, 1, statement_timestamp(),
           statement_timestamp() + make_interval(secs => %(lease)s::double precision)
    FROM unnest(%(holder_scopes)s::text[], %(holder_runs)s::text[]) AS h(scope, run_id)
    JOIN claimed AS c ON c.id = h.run_id
    ON CONFLICT (scope, holder) DO UPDATE SET
        run_id = excluded.run_id, attempt = excluded.attempt, worker_id = excluded.worker_id,
        slots = excluded.slots, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
)
SELECT id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect
FROM claimed ORDER BY n;

-- name: next_due
-- Seconds until the earliest queued run not yet due falls due (one index probe
-- per queue). A due run that is blocked waits for a release (a wake-up), not a timer.
SELECT extract(epoch FROM min(d.scheduled_at) - statement_timestamp())::double precision
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT scheduled_at FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name AND scheduled_at > statement_timestamp()
    ORDER BY scheduled_at
    LIMIT 1
) AS d;

-- name: renew_leases
-- Only the server's clock sets a lease, so a just-renewed lease is never reaped.
-- Locks in id order first, like cycle_reports. The holder rows of a renewed
-- attempt are renewed with it.
WITH locked AS (
    SELECT id FROM tidegate_runs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY id
    FOR UPDATE
), renewed AS (
    UPDATE tidegate_runs AS r SET lease_expires_at = now() + make_interval(secs => %(lease)s::double precision)
    FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) AS f(id, attempt), locked AS l
    WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING r.id, r.attempt
), holders AS (
    -- A run's own holders and its fan-out window slots share its lease; pool
    -- holders keep their pool's lease, renewed by their step (renew_slots).
    UPDATE tidegate_holders AS h SET expires_at = now() + make_interval(secs => %(lease)s::double precision)
    FROM renewed AS n
    WHERE h.run_id = n.id AND h.worker_id = %(worker)s::text AND NOT (h.scope >= 'pool:' AND h.scope < 'pool;')
)
SELECT id, attempt FROM renewed;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong (its event says charged: false). It keeps
-- its place in the queue and its suspect flag. A run whose cancel was asked
-- ends canceled. Locks in id order first, like cycle_reports.
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
        worker_id = NULL, lease_expires_at = NULL
    FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) WITH ORDINALITY AS f(id, attempt, n), locked AS l
    WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING f.n, r.id, r.attempt, r.status, r.suspect
), released AS (
    DELETE FROM tidegate_holders AS h USING back AS b WHERE h.run_id = b.id
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL,
           CASE WHEN status = 'queued' THEN 'RunRequeued' ELSE 'RunCanceled' END,
           jsonb_build_object('attempt', attempt, 'reason', %(reason)s::text, 'worker', %(worker)s::text,
                              'charged', false, 'suspect', suspect),
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

-- name: sweep_lost
-- The running attempts known lost, locked, with what the rescue rule
-- (domain/recovery.py) needs. Two ways a run is known lost: its lease lapsed,
-- or its worker's registry heartbeat stopped (an orphan: the worker is gone
-- whatever its leases say, started or claimed-but-never-started alike). A row
-- some transaction holds (a renewal, an outcome) is skipped, not waited on,
-- and swept next time if it is still lost. `beside` counts the other runs of
-- the same worker still running or already rescued from it (by this sweep or
-- an earlier one): a run that shared its lost worker is not charged.
WITH lost AS (
    SELECT r.id, r.attempt, r.max_attempts, r.worker_id, r.cancel_requested, r.suspect,
           r.started_at IS NOT NULL AS started, r.lease_expires_at < now() AS lapsed
    FROM tidegate_runs AS r
    WHERE r.status = 'running'
      AND (r.lease_expires_at < now()
           OR EXISTS (SELECT 1 FROM tidegate_workers AS w WHERE w.id = r.worker_id AND w.expires_at < now()))
    FOR UPDATE OF r SKIP LOCKED
)
SELECT l.id, l.attempt, l.max_attempts, l.worker_id, l.cancel_requested, l.suspect, l.started, l.lapsed,
       ((SELECT count(*) FROM tidegate_runs AS o
         WHERE o.worker_id = l.worker_id AND o.status = 'running' AND o.id <> l.id)
        + (SELECT count(*) FROM tidegate_runs AS o WHERE o.rescued_from = l.worker_id AND o.id <> l.id))::integer
       AS beside
FROM lost AS l ORDER BY l.id;

-- name: sweep_recover
-- Writes the rescue's verdicts (locked by sweep_lost in this transaction):
-- re-queued (keeping its place: scheduled_at is not moved), failed or
-- canceled, with `max_attempts` grown when the attempt was not charged, the
-- suspect flag, the worker it was rescued from; frees its holders and
-- records its event. submitted_at and deadline_at are kept: a recovered
-- run's dispatch deadline still counts from submission.
WITH verdicts AS (
    SELECT * FROM jsonb_to_recordset(%(verdicts)s::jsonb) AS v(
        id text, attempt integer, status text, error text, max_attempts integer, suspect boolean,
        worker text, event text, metadata jsonb)
), recovered AS (
    UPDATE tidegate_runs AS r SET
        status = v.status, error = coalesce(v.error, r.error),
        finished_at = CASE WHEN v.status = 'queued' THEN NULL ELSE now() END,
        max_attempts = v.max_attempts, suspect = v.suspect, rescued_from = v.worker,
        worker_id = NULL, lease_expires_at = NULL
    FROM verdicts AS v
    WHERE r.id = v.id AND r.attempt = v.attempt AND r.status = 'running'
    RETURNING r.id, r.status, v.event, v.metadata
), released AS (
    DELETE FROM tidegate_holders AS h USING recovered AS v WHERE h.run_id = v.id
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, event, metadata, now() FROM recovered ORDER BY id
)
SELECT id, status FROM recovered ORDER BY id;

-- name: sweep_deadlines
-- Queued runs past their dispatch deadline fail "capacity: ..." (claims no
-- longer see them). A row a claimer holds is skipped: it is being taken, or
-- is failed at the next sweep.
WITH late AS (
    SELECT id FROM tidegate_runs
    WHERE status = 'queued' AND deadline_at <= now()
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE tidegate_runs AS r SET
        status = 'failed', finished_at = now(), block_reason = NULL,
        error = 'capacity: still queued ' || round(extract(epoch FROM now() - r.submitted_at))::bigint
                || 's after submission, past its dispatch deadline; no worker could take it in time'
    FROM late AS l
    WHERE r.id = l.id AND r.status = 'queued'
    RETURNING r.id, r.attempt, r.error
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunFailed', jsonb_build_object('attempt', attempt, 'error', error), now()
    FROM failed ORDER BY id
)
SELECT id FROM failed ORDER BY id;

-- name: forget_dead_workers
-- Registry rows whose heartbeat stopped and who hold no running run any more
-- (sweep_recover, earlier in the same transaction, took their runs back).
DELETE FROM tidegate_workers AS w
WHERE w.expires_at < now()
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running');

-- name: sweep_leaks
-- Holders whose run no longer runs that attempt. Releases happen in the same
-- transaction as every status change, so this should always be empty; each
-- one repaired gets a SlotLeakRepaired event. A holder row some transaction
-- holds is skipped (it is being released or renewed right now).
WITH leaked AS (
    SELECT h.scope, h.holder FROM tidegate_holders AS h
    LEFT JOIN tidegate_runs AS r ON r.id = h.run_id
    WHERE r.id IS NULL OR r.status <> 'running' OR r.attempt <> h.attempt
    FOR UPDATE OF h SKIP LOCKED
), repaired AS (
    DELETE FROM tidegate_holders AS h USING leaked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.scope, h.holder, h.run_id, h.attempt, h.slots
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT run_id, NULL, 'SlotLeakRepaired',
           jsonb_build_object('scope', scope, 'slots', slots, 'attempt', attempt), now()
    FROM repaired ORDER BY scope, holder
)
SELECT count(*)::integer FROM repaired;

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
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect
FROM tidegate_runs WHERE id = %(id)s::text;

-- name: list_runs
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect
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

-- name: insert_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (%(run_id)s::text, NULL, %(type)s::text, %(metadata)s::jsonb, now());

-- name: load_rules
-- The declared limits and live overrides in one snapshot, with their version;
-- only the version when it equals `known` (what the adapter has cached).
SELECT v.value,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT value FROM tidegate_settings WHERE name = 'run_queue') END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(config ORDER BY name), '[]'::jsonb) FROM tidegate_queues) END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(jsonb_build_array(target, "limit") ORDER BY target), '[]'::jsonb)
                  FROM tidegate_limit_overrides) END
FROM tidegate_settings AS v WHERE v.name = 'rules_version';

-- name: register_limits
-- Code declarations, in one statement: the run-queue config (unless NULL), the
-- declared queues (replaced when they differ) and the queues tasks use without
-- declaring them (known with no limits, unless declared elsewhere). When any
-- of these changed, the rules version moves and workers are woken (a raised
-- limit may unblock runs).
WITH run_queue AS (
    INSERT INTO tidegate_settings (name, value, updated_at)
    SELECT 'run_queue', %(run_queue)s::text, now() WHERE %(run_queue)s::text IS NOT NULL
    ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
    WHERE tidegate_settings.value <> excluded.value
    RETURNING name
), declared AS (
    INSERT INTO tidegate_queues (name, config, updated_at)
    SELECT q.name, q.config, now() FROM jsonb_to_recordset(%(queues)s::jsonb) AS q(name text, config jsonb)
    ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at
    WHERE tidegate_queues.config <> excluded.config
    RETURNING name
), implied AS (
    INSERT INTO tidegate_queues (name, config, updated_at)
    SELECT q.name, q.config, now() FROM jsonb_to_recordset(%(implied)s::jsonb) AS q(name text, config jsonb)
    ON CONFLICT (name) DO NOTHING
    RETURNING name
), bumped AS (
    UPDATE tidegate_settings SET value = (value::bigint + 1)::text, updated_at = now()
    WHERE name = 'rules_version'
      AND EXISTS (SELECT 1 FROM run_queue UNION ALL SELECT 1 FROM declared UNION ALL SELECT 1 FROM implied)
    RETURNING value
)
SELECT pg_notify('tidegate_' || md5(current_schema()), '') FROM bumped;

-- name: bump_rules_version
UPDATE tidegate_settings SET value = (value::bigint + 1)::text, updated_at = now()
WHERE name = 'rules_version';

-- name: load_overrides
SELECT target, "limit", version, updated_at FROM tidegate_limit_overrides ORDER BY target;

-- name: set_override
INSERT INTO tidegate_limit_overrides (target, "limit", version, updated_at)
VALUES (%(target)s::text, %(limit)s::integer, 1, now())
ON CONFLICT (target) DO UPDATE SET
    "limit" = excluded."limit", version = tidegate_limit_overrides.version + 1, updated_at = excluded.updated_at
RETURNING version;

-- name: reset_override
DELETE FROM tidegate_limit_overrides WHERE target = %(target)s::text RETURNING "limit", version;

-- name: scope_usage
-- Run-level scopes only: a run's own holders (holder = its id); steps' pool
-- and window slots are shown by `pools`.
SELECT scope, sum(slots)::integer FROM tidegate_holders WHERE holder = run_id GROUP BY scope ORDER BY scope;

-- name: scope_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = %(scope)s::text ORDER BY claimed_at, holder;

-- name: list_queued
SELECT id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
       submitted_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
       cancel_requested, result, error, block_reason, suspect
FROM tidegate_runs
WHERE status = 'queued' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY priority DESC, scheduled_at, id
LIMIT %(limit)s::integer;

-- name: queue_position
-- (runs ahead of it in its queue's claim order, runs queued in that queue); no row: no such run.
SELECT
    (SELECT count(*)::integer FROM tidegate_runs AS o
     WHERE o.status = 'queued' AND o.queue = r.queue
       AND (o.priority > r.priority OR (o.priority = r.priority
            AND (o.scheduled_at < r.scheduled_at OR (o.scheduled_at = r.scheduled_at AND o.id < r.id))))),
    (SELECT count(*)::integer FROM tidegate_runs AS o WHERE o.status = 'queued' AND o.queue = r.queue)
FROM tidegate_runs AS r WHERE r.id = %(id)s::text;

-- --- pools and steps ----------------------------------------------------------
-- Step holders: scope 'pool:NAME' or 'fanout:RUN/MAP', holder 'RUN/STEPKEY'.
-- Pool scopes are the key range ['pool:', 'pool;') (';' follows ':'; keys are
-- COLLATE "C"), which the primary key (scope, holder) serves. Every write is
-- fenced on the run's (id, attempt): `step_fence` share-locks the run row of a
-- running attempt first, so no takeover can commit in between, and a statement
-- that follows it writes nothing when it found no row.

-- name: step_fence
SELECT lease_expires_at FROM tidegate_runs
WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
FOR SHARE;

-- name: insert_step_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (%(run_id)s::text, %(step_key)s::text, %(type)s::text, %(metadata)s::jsonb, statement_timestamp());

-- name: set_pool_limit
-- After the pool's scope row is locked (upsert_scopes, lock_scopes): no claim
-- judged by the old limit is in flight meanwhile. Wakes waiters.
WITH before AS (
    SELECT "limit" FROM tidegate_pools WHERE name = %(name)s::text
), saved AS (
    INSERT INTO tidegate_pools (name, "limit", lease_seconds, updated_at)
    VALUES (%(name)s::text, %(limit)s::integer, %(lease)s::double precision, now())
    ON CONFLICT (name) DO UPDATE SET
        "limit" = excluded."limit", lease_seconds = excluded.lease_seconds, updated_at = excluded.updated_at
    RETURNING name, "limit", lease_seconds, updated_at
), changed AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT NULL, NULL, 'LimitChanged',
           jsonb_build_object('target', 'pool:' || name, 'old', (SELECT "limit" FROM before), 'new', "limit",
                              'lease_seconds', lease_seconds),
           now()
    FROM saved
)
SELECT name, "limit", lease_seconds, updated_at, pg_notify('tidegate_' || md5(current_schema()), '') FROM saved;

-- name: pools
-- Configured pools, and unconfigured ones that are held or waited for. Pending
-- counts steps waiting for the pool whose attempt still owns its run.
WITH claimed AS (
    SELECT substr(scope, 6) AS name, sum(slots)::integer AS claimed FROM tidegate_holders
    WHERE scope >= 'pool:' AND scope < 'pool;'
    GROUP BY scope
), pending AS (
    SELECT substr(w.key, 6) AS name, count(*)::integer AS pending
    FROM tidegate_steps AS s
    JOIN tidegate_runs AS r ON r.id = s.run_id AND r.status = 'running' AND r.attempt = s.attempt
    CROSS JOIN LATERAL jsonb_each(s.waiting_for) AS w
    WHERE s.waiting_for IS NOT NULL AND w.key >= 'pool:' AND w.key < 'pool;'
    GROUP BY w.key
), named AS (
    SELECT name FROM tidegate_pools UNION SELECT name FROM claimed UNION SELECT name FROM pending
)
SELECT n.name, p."limit", p.lease_seconds, coalesce(c.claimed, 0), coalesce(w.pending, 0)
FROM named AS n
LEFT JOIN tidegate_pools AS p ON p.name = n.name
LEFT JOIN claimed AS c ON c.name = n.name
LEFT JOIN pending AS w ON w.name = n.name
ORDER BY n.name COLLATE "C";

-- name: pool_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = 'pool:' || %(pool)s::text ORDER BY claimed_at, holder;

-- name: acquire_slots_limits
-- Read after the scope rows are locked, so a limit changed meanwhile is seen.
SELECT name, "limit", lease_seconds FROM tidegate_pools
WHERE name = ANY(%(pools)s::text[]);

-- name: acquire_slots_usage
-- Per scope asked for: the slots in use (the sum of every holder) and, as
-- {holder: slots}, what the asking steps hold of it already (re-asking for
-- that is a grant). Exact while the scope rows stay locked.
SELECT scope, sum(slots)::integer,
       jsonb_object_agg(holder, slots) FILTER (WHERE holder = ANY(%(holders)s::text[]))
FROM tidegate_holders
WHERE scope = ANY(%(scopes)s::text[])
GROUP BY scope;

-- name: acquire_slots
-- One holder row per scope (a row this holder already has is taken over),
-- leased for its pool's lease, or for the run's lease when `lease` is NULL
-- (fan-out windows); then the step waits no more, and the events.
WITH wanted AS (
    SELECT * FROM jsonb_to_recordset(%(holders)s::jsonb) AS h(scope text, slots integer, lease double precision)
), held AS (
    INSERT INTO tidegate_holders AS t (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
    SELECT w.scope, %(holder)s::text, %(run_id)s::text, %(attempt)s::integer, %(worker)s::text, w.slots,
           statement_timestamp(),
           coalesce(statement_timestamp() + make_interval(secs => w.lease),
                    (SELECT lease_expires_at FROM tidegate_runs WHERE id = %(run_id)s::text))
    FROM wanted AS w ORDER BY w.scope
    ON CONFLICT (scope, holder) DO UPDATE SET
        run_id = excluded.run_id, attempt = excluded.attempt, worker_id = excluded.worker_id,
        slots = excluded.slots, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
), granted AS (
    UPDATE tidegate_steps SET waiting_for = NULL
    WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND waiting_for IS NOT NULL
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT %(run_id)s::text, %(step_key)s::text, type, metadata, statement_timestamp()
FROM (
    SELECT 0 AS n, 'StepSlotClaimed' AS type, %(claimed)s::jsonb AS metadata
    UNION ALL
    -- An unconfigured pool is unlimited: said once per run, the first time a step uses it.
    SELECT 1, 'PoolUnconfigured',
           jsonb_build_object('pool', u.pool, 'limit', NULL, 'note', %(note)s::text)
    FROM unnest(%(unconfigured)s::text[]) AS u(pool)
    WHERE NOT EXISTS (SELECT 1 FROM tidegate_events AS e
                      WHERE e.run_id = %(run_id)s::text AND e.type = 'PoolUnconfigured'
                        AND e.metadata ->> 'pool' = u.pool)
) AS e
ORDER BY n;

-- name: acquire_slots_granted
-- A grant of what the step already held: it waits no more, nothing else changes.
UPDATE tidegate_steps SET waiting_for = NULL
WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND waiting_for IS NOT NULL;

-- name: acquire_slots_waiting
-- Mark the step waiting (creating its row if needed); only the first wait
-- under this attempt (or for other slots) gets the StepSlotWaiting event.
WITH marked AS (
    INSERT INTO tidegate_steps (run_id, step_key, status, waiting_for, attempt)
    VALUES (%(run_id)s::text, %(step_key)s::text, 'pending', %(needs)s::jsonb, %(attempt)s::integer)
    ON CONFLICT (run_id, step_key) DO UPDATE SET waiting_for = excluded.waiting_for, attempt = excluded.attempt
    WHERE tidegate_steps.waiting_for IS NULL OR tidegate_steps.attempt <> excluded.attempt
       OR tidegate_steps.waiting_for <> excluded.waiting_for
    RETURNING step_key
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT %(run_id)s::text, step_key, 'StepSlotWaiting', %(metadata)s::jsonb, statement_timestamp() FROM marked;

-- name: finish_step_pools
-- The successor's pools, as a finished step hands its slots on: whether a step
-- of another live run waits for one of them (then slots are freed for
-- everyone rather than kept by this run), whether one holds more than its
-- limit (lowered meanwhile), and whether one has no room for another request
-- like the successor's; and whether the successor still waits (a step that
-- got its slots by its own try, and may have finished since, is no successor).
-- The first walks the running runs (few: at most the workers' capacity),
-- never this run's own waiting steps.
WITH asked AS (
    SELECT key AS scope, value::integer AS slots FROM jsonb_each_text(%(needs)s::jsonb)
    WHERE key >= 'pool:' AND key < 'pool;'
), used AS (
    SELECT a.slots, p."limit",
           (SELECT coalesce(sum(h.slots), 0) FROM tidegate_holders AS h WHERE h.scope = a.scope) AS used
    FROM asked AS a JOIN tidegate_pools AS p ON p.name = substr(a.scope, 6)
)
SELECT
    EXISTS (
        SELECT 1 FROM tidegate_runs AS r
        JOIN tidegate_steps AS s ON s.run_id = r.id AND s.attempt = r.attempt
        WHERE r.status = 'running' AND r.id <> %(run_id)s::text AND s.waiting_for IS NOT NULL
          AND s.waiting_for ?| ARRAY(SELECT scope FROM asked)
    ),
    EXISTS (SELECT 1 FROM used WHERE used > "limit"),
    EXISTS (SELECT 1 FROM used WHERE used + slots > "limit"),
    EXISTS (
        SELECT 1 FROM tidegate_steps
        WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND attempt = %(attempt)s::integer
          AND waiting_for IS NOT NULL
    );

-- name: hand_on_holders
-- A finished step's holders of the successor's scopes become the successor's:
-- a slot changes hands, the sum in use does not, so no scope row is locked.
-- Each is leased anew (a pool by its lease; a window keeps the run's). Only
-- rows of the slots asked for, of the finished step's attempt, and of scopes
-- the successor holds nothing of, while the attempt owns its run; then
-- StepSlotReleased and StepSlotClaimed for the pools among them. Returns each
-- moved scope, its slots and its new lease in seconds.
WITH run AS (
    SELECT id FROM tidegate_runs
    WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
    FOR SHARE
), needs AS (
    SELECT key AS scope, value::integer AS slots FROM jsonb_each_text(%(needs)s::jsonb)
    WHERE EXISTS (SELECT 1 FROM run)
), moved AS (
    UPDATE tidegate_holders AS h
    SET holder = %(to_holder)s::text, worker_id = %(worker)s::text, claimed_at = statement_timestamp(),
        expires_at = CASE WHEN h.scope >= 'pool:' AND h.scope < 'pool;'
            THEN statement_timestamp() + make_interval(secs => coalesce(
                (SELECT lease_seconds FROM tidegate_pools WHERE name = substr(h.scope, 6)),
                %(default_lease)s::double precision))
            ELSE h.expires_at END
    FROM needs AS n
    WHERE h.holder = %(from_holder)s::text AND h.attempt = %(attempt)s::integer
      AND h.scope = n.scope AND h.slots = n.slots
      AND NOT EXISTS (SELECT 1 FROM tidegate_holders AS b WHERE b.holder = %(to_holder)s::text AND b.scope = h.scope)
    RETURNING h.scope, h.slots, extract(epoch FROM h.expires_at - h.claimed_at)::double precision AS lease
), pools AS (
    SELECT jsonb_object_agg(substr(scope, 6), slots) AS pools FROM moved WHERE scope >= 'pool:' AND scope < 'pool;'
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT %(run_id)s::text, e.step_key, e.type, e.metadata, statement_timestamp()
    FROM pools AS p, LATERAL (VALUES
        (0, %(from_key)s::text, 'StepSlotReleased',
         jsonb_build_object('attempt', %(attempt)s::integer, 'pools', p.pools, 'reason', %(reason)s::text)),
        (1, %(to_key)s::text, 'StepSlotClaimed',
         jsonb_build_object('attempt', %(attempt)s::integer, 'pools', p.pools, 'handed_from', %(from_key)s::text))
    ) AS e(n, step_key, type, metadata)
    WHERE p.pools IS NOT NULL
    ORDER BY e.n
)
SELECT scope, slots, lease FROM moved;

-- name: renew_slots
-- Each pool holder of the step, by its pool's lease (an unconfigured pool's
-- default), locked in scope order like every writer of a step's holders.
WITH run AS (
    SELECT id FROM tidegate_runs
    WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
    FOR SHARE
), locked AS (
    SELECT scope, holder FROM tidegate_holders
    WHERE holder = %(holder)s::text AND attempt = %(attempt)s::integer AND scope >= 'pool:' AND scope < 'pool;'
      AND EXISTS (SELECT 1 FROM run)
    ORDER BY scope
    FOR UPDATE
), renewed AS (
    UPDATE tidegate_holders AS h
    SET expires_at = now() + make_interval(secs => coalesce(
        (SELECT lease_seconds FROM tidegate_pools WHERE name = substr(h.scope, 6)), %(default_lease)s::double precision))
    FROM locked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.scope
), event AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT %(run_id)s::text, %(step_key)s::text, 'StepSlotRenewed',
           jsonb_build_object('attempt', %(attempt)s::integer,
                              'pools', (SELECT jsonb_agg(substr(scope, 6) ORDER BY scope) FROM renewed)),
           now()
    WHERE EXISTS (SELECT 1 FROM renewed)
)
SELECT count(*)::integer FROM renewed;

-- name: release_slots
-- The step's pool holders (locked in scope order first), its event, and a
-- wake-up for whoever waits for them.
WITH run AS (
    SELECT id FROM tidegate_runs
    WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
    FOR SHARE
), locked AS (
    SELECT scope, holder FROM tidegate_holders
    WHERE holder = %(holder)s::text AND attempt = %(attempt)s::integer AND scope >= 'pool:' AND scope < 'pool;'
      AND EXISTS (SELECT 1 FROM run)
    ORDER BY scope
    FOR UPDATE
), freed AS (
    DELETE FROM tidegate_holders AS h USING locked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.scope, h.slots
), event AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT %(run_id)s::text, %(step_key)s::text, 'StepSlotReleased',
           jsonb_build_object('attempt', %(attempt)s::integer,
                              'pools', (SELECT jsonb_object_agg(substr(scope, 6), slots) FROM freed),
                              'reason', 'released'),
           now()
    WHERE EXISTS (SELECT 1 FROM freed)
)
SELECT pg_notify('tidegate_' || md5(current_schema()), '') WHERE EXISTS (SELECT 1 FROM freed);

-- name: record_steps
-- Upsert each step (a completed step is a checkpoint and stays as it is); a
-- step recorded finished frees every holder it still has (its window slot
-- too), with StepSlotReleased for its pools; then each written step's own
-- event (computed by the adapter). Returns whether the fence held and how many
-- holders were freed; waiters are woken for them unless `wake` is false (a
-- finished step handing its slots on decides after this statement).
WITH run AS (
    SELECT id FROM tidegate_runs
    WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
    FOR SHARE
), input AS (
    SELECT * FROM jsonb_to_recordset(%(steps)s::jsonb) AS s(
        n integer, step_key text, map_key text, item_index integer, status text, output jsonb, error text,
        event text, metadata jsonb)
), written AS (
    INSERT INTO tidegate_steps AS t (
        run_id, step_key, map_key, item_index, status, output, error, waiting_for, attempt, started_at, finished_at)
    SELECT %(run_id)s::text, i.step_key, i.map_key, i.item_index, i.status, i.output, i.error, NULL,
           %(attempt)s::integer,
           CASE WHEN i.status = 'running' THEN now() END,
           CASE WHEN i.status IN ('completed', 'failed') THEN now() END
    FROM input AS i WHERE EXISTS (SELECT 1 FROM run)
    ORDER BY i.n
    ON CONFLICT (run_id, step_key) DO UPDATE SET
        map_key = coalesce(excluded.map_key, t.map_key),
        item_index = coalesce(excluded.item_index, t.item_index),
        status = excluded.status, output = excluded.output, error = excluded.error,
        waiting_for = CASE WHEN excluded.status = 'pending' AND t.attempt = excluded.attempt THEN t.waiting_for END,
        attempt = excluded.attempt,
        started_at = CASE excluded.status WHEN 'running' THEN excluded.started_at WHEN 'pending' THEN NULL
                          ELSE t.started_at END,
        finished_at = excluded.finished_at
    WHERE t.status <> 'completed'
    RETURNING t.step_key, t.status
), locked AS (
    SELECT h.scope, h.holder FROM tidegate_holders AS h
    JOIN written AS w ON h.holder = %(run_id)s::text || '/' || w.step_key
    WHERE w.status IN ('completed', 'failed') AND h.attempt = %(attempt)s::integer
    ORDER BY h.holder, h.scope
    FOR UPDATE OF h
), freed AS (
    DELETE FROM tidegate_holders AS h USING locked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.holder, h.scope, h.slots
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT %(run_id)s::text, step_key, type, metadata, now()
    FROM (
        SELECT i.n, 0 AS part, i.step_key, 'StepSlotReleased' AS type,
               jsonb_build_object('attempt', %(attempt)s::integer,
                                  'pools', (SELECT jsonb_object_agg(substr(f.scope, 6), f.slots) FROM freed AS f
                                            WHERE f.holder = %(run_id)s::text || '/' || w.step_key
                                              AND f.scope >= 'pool:' AND f.scope < 'pool;'),
                                  'reason', 'step ' || w.status) AS metadata
        FROM written AS w JOIN input AS i ON i.step_key = w.step_key
        WHERE EXISTS (SELECT 1 FROM freed AS f
                      WHERE f.holder = %(run_id)s::text || '/' || w.step_key
                        AND f.scope >= 'pool:' AND f.scope < 'pool;')
        UNION ALL
        SELECT i.n, 1, i.step_key, i.event, i.metadata
        FROM written AS w JOIN input AS i ON i.step_key = w.step_key
        WHERE i.event IS NOT NULL
    ) AS e
    ORDER BY n, part
)
SELECT EXISTS (SELECT 1 FROM run), (SELECT count(*) FROM freed),
       (SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) FROM freed WHERE %(wake)s::boolean);

-- name: run_steps
SELECT run_id, step_key, map_key, item_index, status, output, error, waiting_for, attempt, started_at, finished_at
FROM tidegate_steps WHERE run_id = %(run_id)s::text ORDER BY recorded;

-- name: next_map_item
-- After the run's fence and the window's scope row are locked: if the window
-- has room, the lowest-index item not finished and not taken by this attempt
-- is marked running and gets its window holder, leased with the run.
WITH run AS (
    SELECT lease_expires_at FROM tidegate_runs
    WHERE id = %(run_id)s::text AND attempt = %(attempt)s::integer AND status = 'running'
), item AS (
    SELECT step_key FROM tidegate_steps
    WHERE run_id = %(run_id)s::text AND map_key = %(map_key)s::text
      AND (status = 'pending' OR (status = 'running' AND attempt <> %(attempt)s::integer))
      AND EXISTS (SELECT 1 FROM run)
      AND (SELECT coalesce(sum(slots), 0) FROM tidegate_holders WHERE scope = %(scope)s::text) < %(window)s::integer
    ORDER BY item_index
    LIMIT 1
    FOR UPDATE
), taken AS (
    UPDATE tidegate_steps AS s SET status = 'running', attempt = %(attempt)s::integer, started_at = NULL,
        finished_at = NULL, output = NULL, error = NULL, waiting_for = NULL
    FROM item
    WHERE s.run_id = %(run_id)s::text AND s.step_key = item.step_key
    RETURNING s.run_id, s.step_key, s.map_key, s.item_index, s.status, s.output, s.error, s.waiting_for,
              s.attempt, s.started_at, s.finished_at
), held AS (
    INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
    SELECT %(scope)s::text, %(run_id)s::text || '/' || step_key, %(run_id)s::text, %(attempt)s::integer,
           %(worker)s::text, 1, statement_timestamp(), (SELECT lease_expires_at FROM run)
    FROM taken
    ON CONFLICT (scope, holder) DO UPDATE SET
        attempt = excluded.attempt, worker_id = excluded.worker_id, claimed_at = excluded.claimed_at,
        expires_at = excluded.expires_at
)
SELECT * FROM taken;

-- name: sweep_step_holders
-- Every holder of each step that has a holder whose lease expired: a step that
-- lost one of its pools lost its claim, so it never keeps only part of them.
-- A step whose rows some transaction holds (a renewal, a release) is skipped,
-- not waited on, and looked at again next sweep; the lock re-reads a row a
-- renewal just committed, so a just-renewed lease is never reaped.
WITH candidates AS (
    SELECT DISTINCT holder FROM tidegate_holders WHERE expires_at < now() AND holder <> run_id
), locked AS (
    SELECT h.scope, h.holder, h.expires_at FROM tidegate_holders AS h
    WHERE h.holder IN (SELECT holder FROM candidates)
    ORDER BY h.holder, h.scope
    FOR UPDATE SKIP LOCKED
), whole AS (
    SELECT l.holder FROM locked AS l
    GROUP BY l.holder
    HAVING bool_or(l.expires_at < now())
       AND count(*) = (SELECT count(*) FROM tidegate_holders AS t WHERE t.holder = l.holder)
), freed AS (
    DELETE FROM tidegate_holders AS h USING whole AS w
    WHERE h.holder = w.holder
    RETURNING h.scope, h.holder, h.run_id, h.attempt, h.slots
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT run_id, substr(holder, length(run_id) + 2), 'StepSlotReleased',
           jsonb_build_object('attempt', attempt, 'pools', jsonb_object_agg(substr(scope, 6), slots),
                              'reason', %(reason)s::text),
           now()
    FROM freed WHERE scope >= 'pool:' AND scope < 'pool;'
    GROUP BY holder, run_id, attempt
    ORDER BY holder
)
SELECT count(*)::integer FROM freed;

-- name: register_worker_lock
-- Workers registering at once take ranks one at a time, so no two get the same.
SELECT pg_advisory_xact_lock(hashtext('tidegate:workers'), hashtext(coalesce(current_schema(), '')));

-- name: live_worker_ranks
SELECT id, rank FROM tidegate_workers WHERE expires_at >= now();

-- name: register_worker
INSERT INTO tidegate_workers AS w (id, rank, capacity, queues, fill_order, started_at, heartbeat_at, expires_at)
VALUES (%(id)s::text, %(rank)s::integer, %(capacity)s::integer, %(queues)s::jsonb, %(fill_order)s::boolean,
        now(), now(), now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (id) DO UPDATE SET
    rank = excluded.rank, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: heartbeat_worker
UPDATE tidegate_workers SET heartbeat_at = now(), expires_at = now() + make_interval(secs => %(ttl)s::double precision)
WHERE id = %(id)s::text
RETURNING rank;

-- name: deregister_worker
DELETE FROM tidegate_workers WHERE id = %(id)s::text;

-- name: release_locks
-- A leaving worker hands its duties (the sweeper's turn) to the others at once.
DELETE FROM tidegate_locks WHERE holder = %(id)s::text;

-- name: worker_fill_state
-- Live workers with their running runs, for the fill order and the overflow check.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order,
       (SELECT count(*)::integer FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running')
       AS running
FROM tidegate_workers AS w
WHERE w.expires_at >= now();

-- name: check_overflow_window
-- The first due runs of each queue in claim order, as claim_window reads them
-- but without locking them: looking must not hide runs from claimers.
SELECT c.id, c.task, c.queue, c.partition_key, c.tags, c.priority, c.scheduled_at, c.block_reason, c.suspect
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name AND scheduled_at <= now()
      AND (deadline_at IS NULL OR deadline_at > now())
    ORDER BY priority DESC, scheduled_at, id
    LIMIT %(limit)s::integer
) AS c;

-- name: take_turn
-- A duty done at most once per interval across all workers (unlike take_lock, the holder does not renew).
INSERT INTO tidegate_locks (name, holder, expires_at)
VALUES (%(name)s::text, %(holder)s::text, now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < now()
RETURNING holder;
