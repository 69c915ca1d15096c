-- PostgreSQL queries of claims.py: the worker's cycle: reports, the claim, its reads and writes.
-- Conventions (parameters, clock, batches): database.sql.

-- name: cycle_reports
-- The starts and outcomes of one cycle, in one statement: a short attempt
-- often reports both at once, and one UPDATE then writes its row once.
-- Fenced on (id, attempt, running, worker): a report about an attempt that
-- was taken over matches no row; an outcome not returned is fenced out.
-- The event type and metadata of each outcome come computed by the adapter
-- (domain.events.attempt_ended); the cancel rule (domain.transitions.settle)
-- and the events built here are pinned to the domain by
-- tests/contract/test_transitions_pinned.py and test_events_pinned.py.
-- An attempt that ended releases its scopes here, in the same statement as its
-- status change, so no slot can outlive it: its own by that change (a run holds
-- its `held_scopes` only while running, 0030_run_scopes.sql), its fan-out
-- window slots by deleting their holder rows.
-- The rows are locked before they are written in the order every verb that
-- locks several runs keeps (deeper first, then id: postgres/children.py's
-- docstring): so no two such transactions (a worker's cycle, its lease
-- renewal, a trigger, a cancel) wait on each other in a circle. Claims and the
-- sweep never wait (SKIP LOCKED).
WITH starts AS (
    SELECT * FROM unnest(%(start_ids)s::text[], %(start_attempts)s::integer[]) WITH ORDINALITY AS s(id, attempt, n)
), outcomes AS (
    SELECT * FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o(
        n integer, id text, attempt integer, status text, result jsonb, error text,
        delay double precision, event text, metadata jsonb, snooze boolean)
), reports AS (
    SELECT coalesce(o.id, s.id) AS id, coalesce(o.attempt, s.attempt) AS attempt,
           s.n AS start_n, o.n AS outcome_n, o.status, o.result, o.error, o.delay, o.event, o.metadata, o.snooze
    FROM starts AS s FULL JOIN outcomes AS o ON o.id = s.id AND o.attempt = s.attempt
), locked AS (
    -- A start already recorded (by a trigger of the attempt, children.sql) is not recorded again.
    -- The reported ids as one array, not a join: as `id IN (SELECT ...)` the planner walked the
    -- worker's running runs against every report (a nested loop: quadratic in the cycle's size).
    SELECT id, started_at IS NULL AS unstarted, held_scopes IS NOT NULL AS held FROM tidegate_runs
    WHERE id = ANY (ARRAY(SELECT id FROM reports)) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY depth DESC, id
    FOR UPDATE
), applied AS (
    UPDATE tidegate_runs AS r SET
        started_at = CASE WHEN p.start_n IS NOT NULL AND l.unstarted THEN tidegate_now() ELSE r.started_at END,
        -- A run whose cancel was requested ends canceled unless it completed.
        status = CASE WHEN p.outcome_n IS NOT NULL AND r.cancel_requested AND p.status IN ('queued', 'failed')
                      THEN 'canceled' ELSE coalesce(p.status, r.status) END,
        result = CASE WHEN p.outcome_n IS NULL THEN r.result ELSE p.result END,
        error = CASE WHEN p.outcome_n IS NULL THEN r.error ELSE p.error END,
        finished_at = CASE WHEN p.outcome_n IS NULL THEN r.finished_at
                           WHEN p.status = 'queued' AND NOT r.cancel_requested THEN NULL
                           ELSE tidegate_now() END,
        queued_at = CASE WHEN p.status = 'queued' AND NOT r.cancel_requested THEN tidegate_now() ELSE r.queued_at END,
        scheduled_at = CASE WHEN p.status = 'queued' AND NOT r.cancel_requested
                            THEN tidegate_now() + make_interval(secs => coalesce(p.delay, 0))
                            ELSE r.scheduled_at END,
        worker_id = CASE WHEN p.outcome_n IS NULL THEN r.worker_id END,
        lease_expires_at = CASE WHEN p.outcome_n IS NULL THEN r.lease_expires_at END,
        cancel_requested = CASE WHEN p.outcome_n IS NULL THEN r.cancel_requested ELSE false END,
        -- A snooze that takes the queue is not charged: the budget grows by one, counted as a snooze.
        max_attempts = CASE WHEN p.snooze AND NOT r.cancel_requested
                            THEN least(r.max_attempts, %(most_attempts)s::integer - 1) + 1
                            ELSE r.max_attempts END,
        snoozes = CASE WHEN p.snooze AND NOT r.cancel_requested THEN r.snoozes + 1 ELSE r.snoozes END,
        -- A suspect whose attempt reported an outcome did not kill its worker: cleared.
        suspect = CASE WHEN p.outcome_n IS NULL THEN r.suspect ELSE false END,
        suspect_group = CASE WHEN p.outcome_n IS NULL THEN r.suspect_group END,
        held_scopes = CASE WHEN p.outcome_n IS NULL THEN r.held_scopes END  -- held no more: not kept
    FROM reports AS p, locked AS l
    WHERE r.id = p.id AND l.id = p.id AND r.attempt = p.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING r.id, r.attempt, r.status, CASE WHEN l.unstarted THEN p.start_n END AS start_n, p.outcome_n,
              p.event, p.metadata, r.queue, r.partition_key, r.rate_charge, r.claimed_at,
              l.held
), released AS (
    DELETE FROM tidegate_holders AS h USING applied AS a
    WHERE h.run_id = a.id AND a.outcome_n IS NOT NULL
), events AS (
    -- The attempt (and a start's worker) in their columns, the rest in metadata, NULL when nothing is left
    -- (0026_event_columns.sql).
    INSERT INTO tidegate_events (run_id, step_key, type, attempt, worker, metadata, at)
    SELECT id, NULL, type, attempt, worker, metadata, tidegate_now()
    FROM (
        SELECT id, 'RunStarted' AS type, attempt, %(worker)s::text AS worker, NULL::jsonb AS metadata,
               0 AS part, start_n AS n
        FROM applied WHERE start_n IS NOT NULL
        UNION ALL
        SELECT id, CASE WHEN status = 'canceled' THEN 'RunCanceled' ELSE event END,
               (metadata ->> 'attempt')::integer, NULL,
               nullif(CASE WHEN status = 'canceled' THEN metadata - 'retry_in' - 'snooze_in' - 'overloaded'
                           ELSE metadata END - 'attempt', '{}'),
               1, outcome_n
        FROM applied WHERE outcome_n IS NOT NULL
    ) AS e
    ORDER BY part, n
)
-- With each outcome, what adaptive limits read (storage/shared/adaptation.py): its queue, partition,
-- when it was claimed (NULL when it held no scope, as a run with no holder had no claim time there)
-- and the rate windows it was charged.
SELECT a.id, a.attempt, a.queue, a.partition_key,
       CASE WHEN %(adapts)s::boolean AND a.held THEN extract(epoch FROM a.claimed_at)::double precision END,
       a.rate_charge
FROM applied AS a WHERE a.outcome_n IS NOT NULL;

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
-- Claim statements stamp with tidegate_statement_timestamp(), not tidegate_now(): the time after
-- this fence and the scope locks were granted, so a claim that waited is never
-- stamped before the release it followed (tidegate_now() is when the transaction began).
SELECT pg_advisory_xact_lock_shared(hashtext('tidegate:rules'), hashtext(coalesce(current_schema(), ''))),
       set_config('enable_sort', 'off', true);

-- name: claim_turn
-- One claimer at a time per queue that a limit applies to, or that is fair
-- (see claim.py, Claim._take_claim_turns); held until commit. A 64-bit key, so two queues
-- practically never share one, and claimers take them in queue-name order.
SELECT pg_advisory_xact_lock(hashtextextended('tidegate:claim/' || coalesce(current_schema(), '') || '/' || %(queue)s::text, 0));

-- name: due_now
-- "Look again at once", as a next-due answer.
SELECT 0.0::double precision;

-- name: claim_window
-- The first due runs of each queue in claim order, locked; rows another
-- claimer holds are skipped, not waited on. One walk of the claim index per
-- queue (queue leads it), each with its own size: `queue = ANY(...)` would sort
-- every due run instead; the cost is the window, not the backlog. Runs that
-- carry a tag of `excluded` (a list of {"key": "value"} objects: full tag
-- scopes) are left out, and suspects unless `suspects`, and runs of the rate
-- partitions `held` (a rate that refuses them now) (the read past them,
-- claiming.candidate_rows). Tags are read only when some tag limit exists (`tags`):
-- otherwise no scope depends on them. They come as text, and the adapter parses
-- each distinct text once (claim_reads.py): a window holds few tag sets. Rows come grouped by queue, unsorted
-- across queues; every row read stays locked until commit.
SELECT c.id, c.task, c.queue, c.partition_key, c.tags, c.priority, c.scheduled_at, c.block_reason, c.suspect, c.resumed, c.rate_key, c.rate_cost
FROM unnest(%(queues)s::text[], %(sizes)s::integer[]) AS q(name, size)
CROSS JOIN LATERAL (
    SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags::text END AS tags,
           priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost FROM tidegate_runs AS r
    WHERE status = 'queued' AND queue = q.name AND scheduled_at <= tidegate_statement_timestamp()
      AND (deadline_at IS NULL OR deadline_at > tidegate_statement_timestamp())
      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
      AND (%(suspects)s::boolean OR NOT suspect)
      -- Rate partitions whose rate refuses a start now. Tested as empty first: most rows share
      -- one rate_key (''), so the generic plan would estimate `rate_key <> ALL` to leave none
      -- and sort the backlog instead of walking the claim index.
      AND (cardinality(%(held)s::text[]) = 0 OR NOT (rate_key = ANY(%(held)s::text[])))
    ORDER BY resumed DESC, priority DESC, scheduled_at, id
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
       h.block_reason, h.suspect, h.resumed, h.rate_key, h.rate_cost
FROM found AS f
CROSS JOIN turns AS t
LEFT JOIN LATERAL (
    SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags::text END AS tags,
           priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost FROM tidegate_runs AS r
    WHERE status = 'queued' AND queue = %(queue)s::text AND partition_key = f.key
      AND scheduled_at <= tidegate_statement_timestamp() AND (deadline_at IS NULL OR deadline_at > tidegate_statement_timestamp())
      AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
    ORDER BY resumed DESC, priority DESC, scheduled_at, id
    LIMIT CASE WHEN f.key = ANY(%(saturated)s::text[]) THEN 1 ELSE t.per_partition END
    FOR UPDATE SKIP LOCKED
) AS h ON true;

-- name: claim_partition_head
-- The head of one partition, when claim_partitions did not read what is asked.
SELECT id, task, queue, partition_key, CASE WHEN %(tags)s::boolean THEN tags::text END AS tags,
       priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost FROM tidegate_runs AS r
WHERE status = 'queued' AND queue = %(queue)s::text AND partition_key = %(partition)s::text
  AND scheduled_at <= tidegate_statement_timestamp() AND (deadline_at IS NULL OR deadline_at > tidegate_statement_timestamp())
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(excluded)s::jsonb) AS x(tag) WHERE r.tags @> x.tag)
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT %(limit)s::integer
FOR UPDATE SKIP LOCKED;

-- name: scope_usage_of
-- Read after the scopes' rows were locked, in a statement of its own (claim_scopes.py).
SELECT scope, sum(slots)::integer FROM tidegate_slot_holders
WHERE scope = ANY(%(keys)s::text[])
GROUP BY scope;

-- name: scope_usage_held
-- A claim's first usage read, sent after the scope rows it locks ahead (`held`,
-- claim_scopes.py): every holder of a held scope, exact while its lock is held
-- (this statement's snapshot is taken after the lock was granted), and the
-- run-level holders of every other scope, a hint of what is full that only
-- chooses which candidates to read.
SELECT scope, sum(slots)::integer FROM tidegate_slot_holders
WHERE holder = run_id OR scope = ANY(%(held)s::text[])
GROUP BY scope;

-- name: try_lock_scopes
-- Scope rows a claim needs below a shared key it already holds (claim_scopes.py):
-- taken only if free, never waited for, so no claimer waits against the key order.
-- A key not returned is held elsewhere or not created yet: the claim takes nothing.
SELECT key FROM tidegate_scopes WHERE key = ANY(%(keys)s::text[]) ORDER BY key FOR UPDATE SKIP LOCKED;

-- name: local_usage
-- With the group of the suspects this worker runs (at most one: domain/admission.py).
SELECT queue, partition_key, count(*)::integer, max(suspect_group) FROM tidegate_runs
WHERE worker_id = %(worker)s::text AND status = 'running'
GROUP BY queue, partition_key;

-- name: suspect_groups
SELECT id, suspect_group FROM tidegate_runs WHERE id = ANY(%(ids)s::text[]);

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
SELECT id, NULL, 'RunBlocked', jsonb_build_object('blocked_by', reason), tidegate_statement_timestamp()
FROM reasons ORDER BY n;

-- name: claim_runs
-- Claims the admitted candidates (locked), in admission order, with their
-- RunDequeued events. Each run's row takes the scopes it now holds
-- (`held_scopes`: while it runs, it is their holder, 0030_run_scopes.sql) and
-- the time it took them. The scopes come as one JSON object, run id to its keys:
-- JSON is encoded in C where psycopg dumps an array element by element in Python.
WITH claimed AS (
    UPDATE tidegate_runs AS r SET
        status = 'running', attempt = r.attempt + 1, worker_id = %(worker)s::text,
        lease_expires_at = tidegate_statement_timestamp() + make_interval(secs => %(lease)s::double precision),
        started_at = NULL, block_reason = NULL,
        resumed = false,  -- a resumed parent goes first once: the claim that takes it ends that
        rate_charge = (%(charges)s::jsonb -> r.id)::text,  -- what its rate windows were charged (refunds)
        held_scopes = %(held)s::jsonb -> r.id, claimed_at = tidegate_statement_timestamp()
    FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS c(id, n)
    -- By primary key alone (the array, which a scan of the table would test against every row):
    -- the candidates are locked by this transaction since they were read queued, so they still
    -- are. With a condition on status, or the join alone, the generic plan made before any ANALYZE
    -- reached them through every queued run (a claim of 8 beside 3,000 queued read all 3,000).
    WHERE r.id = ANY(%(ids)s::text[]) AND r.id = c.id
    RETURNING c.n, r.id, r.task, r.queue, r.args, r.attempt, r.max_attempts, r.retry_backoff, r.timeout, r.suspect,
              greatest(0, extract(epoch FROM tidegate_statement_timestamp() - r.scheduled_at))::double precision
                  AS queued_seconds,
              (r.parent_id IS NOT NULL OR EXISTS (SELECT 1 FROM tidegate_unique_keys AS k WHERE k.run_id = r.id))
                  AS has_parent, r.trace_context, r.snoozes  -- a keyed run may be a linked child (children.sql)
), dequeued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, attempt, worker, metadata, at)
    SELECT id, NULL, 'RunDequeued', attempt, %(worker)s::text, NULL, tidegate_statement_timestamp()
    FROM claimed ORDER BY n
)
SELECT id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect, queued_seconds, has_parent,
       trace_context, snoozes
FROM claimed ORDER BY n;

-- name: next_due
-- Seconds until the earliest queued run not yet due falls due (one index probe
-- per queue). A due run that is blocked waits for a release (a wake-up), not a timer.
SELECT extract(epoch FROM min(d.scheduled_at) - tidegate_statement_timestamp())::double precision
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT scheduled_at FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name AND scheduled_at > tidegate_statement_timestamp()
    ORDER BY scheduled_at
    LIMIT 1
) AS d;

-- name: claim_runs_free
-- The whole claim of a worker whose open queues no limit applies to and that
-- are not fair (free_claims.py), in one statement that rides with the
-- cycle's reports and its COMMIT: one round trip per cycle. There `admit`
-- would take the first `limit` runs across the windows in claim order, which
-- is what this does in SQL; the one thing it leaves to `admit` is a suspect
-- among them (a worker runs one group of suspects at a time): then, as when the rules
-- moved, it claims nothing and says so (`refused`), and the adapter claims
-- again the general way. The rules it was chosen on are those of version
-- `known`: the claim fence, taken before it in the same transaction, keeps
-- the version from moving until commit, and this statement claims only if the
-- version is still `known`, so a limit set live is never claimed past.
-- Rows: the claimed runs in claim order (as claim_runs returns them), then
-- one trailer row (id NULL) with `refused` and, when the claim came back
-- short, the seconds until the next run falls due (next_due).
WITH current_rules AS MATERIALIZED (
    SELECT coalesce((SELECT value = %(known)s::text FROM tidegate_settings WHERE name = 'rules_version'), false)
           AS same
), windows AS MATERIALIZED (
    SELECT c.* FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, suspect, resumed, priority, scheduled_at FROM tidegate_runs
        WHERE status = 'queued' AND queue = q.name AND scheduled_at <= tidegate_statement_timestamp()
          AND (deadline_at IS NULL OR deadline_at > tidegate_statement_timestamp())
        ORDER BY resumed DESC, priority DESC, scheduled_at, id
        LIMIT %(limit)s::integer
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE (SELECT same FROM current_rules)
), picked AS MATERIALIZED (
    -- As an array: unnested below, it is planned as the few rows it is (a join by primary key).
    SELECT array_agg(id ORDER BY n) AS ids, coalesce(bool_or(suspect), false) AS suspect
    FROM (
        SELECT id, suspect, row_number() OVER (ORDER BY resumed DESC, priority DESC, scheduled_at, id) AS n
        FROM windows
        ORDER BY n
        LIMIT %(limit)s::integer
    ) AS first
), verdict AS MATERIALIZED (
    SELECT (SELECT same FROM current_rules) AND NOT (SELECT suspect FROM picked) AS go
), claimed AS (
    UPDATE tidegate_runs AS r SET
        status = 'running', attempt = r.attempt + 1, worker_id = %(worker)s::text,
        lease_expires_at = tidegate_statement_timestamp() + make_interval(secs => %(lease)s::double precision),
        started_at = NULL, block_reason = NULL, resumed = false,
        held_scopes = NULL  -- no limit applies: it holds no scope (0030_run_scopes.sql)
    FROM unnest((SELECT ids FROM picked)) WITH ORDINALITY AS c(id, n)
    -- By primary key alone: `windows` locked these rows queued (see claim_runs).
    WHERE r.id = ANY((SELECT ids FROM picked)::text[]) AND r.id = c.id AND (SELECT go FROM verdict)
    RETURNING c.n, r.id, r.task, r.queue, r.args, r.attempt, r.max_attempts, r.retry_backoff, r.timeout, r.suspect,
              greatest(0, extract(epoch FROM tidegate_statement_timestamp() - r.scheduled_at))::double precision
                  AS queued_seconds,
              (r.parent_id IS NOT NULL OR EXISTS (SELECT 1 FROM tidegate_unique_keys AS k WHERE k.run_id = r.id))
                  AS has_parent, r.trace_context, r.snoozes  -- a keyed run may be a linked child (children.sql)
), dequeued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, attempt, worker, metadata, at)
    SELECT id, NULL, 'RunDequeued', attempt, %(worker)s::text, NULL, tidegate_statement_timestamp()
    FROM claimed ORDER BY n
)
SELECT * FROM (
    SELECT n, id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect, queued_seconds,
           has_parent, trace_context, snoozes, NULL::boolean AS refused, NULL::double precision AS next_due
    FROM claimed
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NOT v.go,
           CASE WHEN v.go AND (SELECT count(*) FROM claimed) < %(limit)s::integer THEN (
               SELECT extract(epoch FROM min(d.scheduled_at) - tidegate_statement_timestamp())::double precision
               FROM unnest(%(queues)s::text[]) AS q(name)
               CROSS JOIN LATERAL (
                   SELECT scheduled_at FROM tidegate_runs
                   WHERE status = 'queued' AND queue = q.name AND scheduled_at > tidegate_statement_timestamp()
                   ORDER BY scheduled_at
                   LIMIT 1
               ) AS d)
           END
    FROM verdict AS v
) AS rows
ORDER BY n NULLS LAST;

-- name: rate_states
-- The stored states of the rate windows a claim's candidates would be charged, locked in key
-- order, with the database's time to charge them at (taken after the rated queues' claim turns
-- were granted: claims of one rate are serialized, so each sees the states the last one wrote).
-- A window of a queue's rate never charged has no row yet: its first charge inserts it, under
-- the same turn; a tag rate's rows were made to exist first (`rate_states_seed`).
-- Found by `scope = ANY(...)`, one index descent per key, which returns them in key order: a
-- claim's transaction runs with enable_sort off (claim_fence), and a join with the keys under
-- ORDER BY then walked the whole primary key to avoid the sort, every stored state (1,000 rate
-- partitions: 1,000 rows visited for a claim of 16); the pairs are matched after.
WITH locked AS (
    SELECT s.scope, s.window_ns, s.tat_ns FROM tidegate_rate_states AS s
    WHERE s.scope = ANY(%(scopes)s::text[])
      AND EXISTS (SELECT 1 FROM unnest(%(scopes)s::text[], %(windows)s::bigint[]) AS k(scope, window_ns)
                  WHERE k.scope = s.scope AND k.window_ns = s.window_ns)
    ORDER BY s.scope, s.window_ns
    FOR UPDATE OF s
)
SELECT extract(epoch FROM tidegate_statement_timestamp())::double precision, l.scope, l.window_ns, l.tat_ns
FROM (SELECT 1) AS n LEFT JOIN locked AS l ON true;

-- name: rate_states_seed
-- The windows of tag rates a claim's candidates would be charged, made to exist (as never
-- charged: 0) before `rate_states` locks them: claimers of different queues charge one tag's
-- rate, and a lock finds no row to hold until one exists. A concurrent first insert of the same
-- key waits here for the other claim to end, then finds its row.
INSERT INTO tidegate_rate_states (scope, window_ns, tat_ns)
SELECT k.scope, k.window_ns, 0 FROM unnest(%(scopes)s::text[], %(windows)s::bigint[]) AS k(scope, window_ns)
ORDER BY k.scope, k.window_ns
ON CONFLICT (scope, window_ns) DO NOTHING;

-- name: rate_states_write
-- The states the claim's charges left, written in its transaction (all or none with the claims).
INSERT INTO tidegate_rate_states AS s (scope, window_ns, tat_ns)
SELECT * FROM unnest(%(scopes)s::text[], %(windows)s::bigint[], %(tats)s::bigint[])
ON CONFLICT (scope, window_ns) DO UPDATE SET tat_ns = excluded.tat_ns;

-- name: recharged_runs
-- This worker's runs taken ahead whose lead ran out, not started yet (`CycleRequest.recharge`), as
-- a claim reads its candidates; unlocked: only their worker's cycle changes them before they start.
SELECT r.id, r.task, r.queue, r.partition_key, r.tags, r.priority, r.scheduled_at, r.suspect, r.resumed,
       r.rate_key, r.rate_cost
FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) AS f(id, attempt)
JOIN tidegate_runs AS r ON r.id = f.id AND r.attempt = f.attempt
WHERE r.status = 'running' AND r.worker_id = %(worker)s::text AND r.started_at IS NULL;
