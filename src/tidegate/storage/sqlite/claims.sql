-- SQLite queries of claims.py: the worker's cycle: reports, the claim, its reads and writes.
-- Conventions (parameters, clock, batches): database.sql.

-- name: cycle_reports_starts
-- A start already recorded (by a trigger of the attempt, children.sql) is not recorded again.
UPDATE tidegate_runs SET started_at = :now
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker AND tidegate_runs.started_at IS NULL
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: cycle_reports
-- Fenced on (id, attempt, running): an outcome from an attempt that was taken
-- over matches no row and is reported back as fenced out. Each outcome comes
-- with the status it asks for and the one it takes when a cancel was requested
-- meanwhile (domain.transitions.settle: a retry must not undo a cancel); the
-- row's cancel_requested picks one. Only a run that goes back to the queue
-- stays unfinished and gets its next time.
UPDATE tidegate_runs SET
    status = iif(tidegate_runs.cancel_requested, o.if_canceled, o.status),
    result = o.result,
    error = o.error,
    finished_at = iif(iif(tidegate_runs.cancel_requested, o.if_canceled, o.status) = 'queued', NULL, :now),
    queued_at = iif(iif(tidegate_runs.cancel_requested, o.if_canceled, o.status) = 'queued', :now,
                    tidegate_runs.queued_at),
    scheduled_at = iif(iif(tidegate_runs.cancel_requested, o.if_canceled, o.status) = 'queued', :now + o.delay,
                       tidegate_runs.scheduled_at),
    worker_id = NULL,
    lease_expires_at = NULL,
    cancel_requested = 0,
    -- a snooze that takes the queue is not charged: the budget grows by one, counted as a snooze
    max_attempts = iif(o.snooze AND iif(tidegate_runs.cancel_requested, o.if_canceled, o.status) = 'queued',
                       min(tidegate_runs.max_attempts, :most_attempts - 1) + 1, tidegate_runs.max_attempts),
    snoozes = tidegate_runs.snoozes
              + iif(o.snooze AND iif(tidegate_runs.cancel_requested, o.if_canceled, o.status) = 'queued', 1, 0),
    -- a suspect whose attempt reported an outcome did not kill its worker: cleared
    suspect = 0, suspect_group = NULL
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.status') AS status,
             json_extract(value, '$.if_canceled') AS if_canceled,
             json_extract(value, '$.result') AS result,
             json_extract(value, '$.error') AS error,
             coalesce(json_extract(value, '$.delay'), 0) AS delay,
             json_extract(value, '$.snooze') AS snooze
      FROM json_each(:outcomes)) AS o
WHERE tidegate_runs.id = o.id AND tidegate_runs.attempt = o.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status, tidegate_runs.queue,
          tidegate_runs.partition_key, tidegate_runs.rate_charge;

-- name: cancel_requests
SELECT id, attempt FROM tidegate_runs
WHERE worker_id = :worker AND status = 'running' AND cancel_requested = 1;

-- name: claim_window
-- One queue at a time so that the claim index delivers rows in order: the
-- cost is the window, not the backlog. Without :suspects, what lies past the
-- suspects; without the rate partitions :held, past a rate that refuses them now
-- (claiming.candidate_rows).
SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost
FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND +scheduled_at <= :now
  AND (deadline_at IS NULL OR deadline_at > :now) AND (:suspects OR NOT suspect)
  AND +rate_key NOT IN (SELECT value FROM json_each(:held))
  AND NOT EXISTS (SELECT 1 FROM json_each(:excluded) AS x
                  WHERE json_extract(tidegate_runs.tags, '$."' || json_extract(x.value, '$[0]') || '"')
                        = json_extract(x.value, '$[1]'))
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT :limit;

-- name: claim_partitions
-- The distinct partitions with queued runs, by skip-scan over the partition
-- index (one seek per partition, however many runs each holds).
WITH RECURSIVE parts(key) AS (
    SELECT (SELECT partition_key FROM tidegate_runs
            WHERE status = 'queued' AND queue = :queue ORDER BY partition_key LIMIT 1)
    UNION ALL
    SELECT (SELECT partition_key FROM tidegate_runs
            WHERE status = 'queued' AND queue = :queue AND partition_key > parts.key
            ORDER BY partition_key LIMIT 1)
    FROM parts WHERE parts.key IS NOT NULL
)
SELECT key FROM parts WHERE key IS NOT NULL LIMIT :limit;

-- name: claim_partition_head
SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost
FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND partition_key = :partition AND +scheduled_at <= :now
  AND (deadline_at IS NULL OR deadline_at > :now)
  AND NOT EXISTS (SELECT 1 FROM json_each(:excluded) AS x
                  WHERE json_extract(tidegate_runs.tags, '$."' || json_extract(x.value, '$[0]') || '"')
                        = json_extract(x.value, '$[1]'))
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT :limit;

-- name: claim_runs
-- :claims is [[id, charge], ...]: each run with what its rate windows were charged (refunds; null
-- when none), read off its own item rather than looked up by id in one object per row.
UPDATE tidegate_runs SET
    status = 'running', attempt = attempt + 1, worker_id = :worker,
    lease_expires_at = :now + :lease, started_at = NULL, block_reason = NULL,
    resumed = 0,  -- a resumed parent goes first once: the claim that takes it ends that
    rate_charge = c.charge
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS charge FROM json_each(:claims)) AS c
WHERE tidegate_runs.id = c.id AND +tidegate_runs.status = 'queued'
RETURNING tidegate_runs.id AS id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect,
          max(0, :now - scheduled_at) AS queued_seconds,
          -- a keyed run may be a linked child (children.sql): its end may resume a parent too
          (parent_id IS NOT NULL OR keyed) AS has_parent, trace_context,
          snoozes;

-- name: next_due
-- Only runs not yet due: a due run that is blocked waits for a release (a wake-up), not a timer.
SELECT min(scheduled_at) - :now FROM tidegate_runs WHERE status = 'queued' AND queue = :queue AND scheduled_at > :now;

-- name: local_usage
-- With the group of the suspects this worker runs (at most one: domain/admission.py).
SELECT queue, partition_key, count(*), max(suspect_group) FROM tidegate_runs
WHERE worker_id = :worker AND status = 'running'
GROUP BY queue, partition_key;

-- name: suspect_groups
SELECT id, suspect_group FROM tidegate_runs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: lane_load
-- Running runs per partition of a fair queue: the least-served partition goes first.
SELECT partition_key, count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue GROUP BY partition_key;

-- name: claim_runs_holders
INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), :worker, 1, :now, :now + :lease
FROM json_each(:holders);

-- name: set_block_reasons
UPDATE tidegate_runs SET block_reason = json_extract(b.value, '$[1]')
FROM json_each(:reasons) AS b
WHERE tidegate_runs.id = json_extract(b.value, '$[0]') AND +tidegate_runs.status = 'queued';

-- name: claim_usage_and_rates
-- A rated claim's one read of what is in use: the slots per scope (scope_usage, limits.sql: a row
-- with no TAT) and the rate states that may refuse a start now (live_rate_states, limits.sql).
-- BEGIN IMMEDIATE serializes claimers: nothing changes either before this claim commits.
SELECT scope, sum(slots), NULL FROM tidegate_holders WHERE holder = run_id GROUP BY scope
UNION ALL
SELECT scope, window_ns, tat_ns FROM tidegate_rate_states WHERE tat_ns > :after;

-- name: rate_states
-- The stored states of rate windows (a refund's or a correction's, leases.py; BEGIN IMMEDIATE
-- serializes writers: nothing changes them before the transaction commits).
SELECT s.scope, s.window_ns, s.tat_ns FROM tidegate_rate_states AS s
JOIN json_each(:keys) AS k
  ON s.scope = json_extract(k.value, '$[0]') AND s.window_ns = json_extract(k.value, '$[1]');

-- name: rate_states_write
INSERT INTO tidegate_rate_states (scope, window_ns, tat_ns)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(:states)
WHERE true
ON CONFLICT (scope, window_ns) DO UPDATE SET tat_ns = excluded.tat_ns;

-- name: recharged_runs
-- This worker's runs taken ahead whose lead ran out, not started yet (`CycleRequest.recharge`).
SELECT r.id, r.task, r.queue, r.partition_key, r.tags, r.priority, r.scheduled_at, r.suspect, r.resumed,
       r.rate_key, r.rate_cost
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
JOIN tidegate_runs AS r ON r.id = f.id AND r.attempt = f.attempt
WHERE +r.status = 'running' AND +r.worker_id = :worker AND r.started_at IS NULL;
