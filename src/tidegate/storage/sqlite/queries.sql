-- SQLite queries, one block per port verb (or step of one).
-- Parameters are named (:name); :now is the adapter's clock, which is the
-- database's clock for an embedded file. Lists arrive as JSON arrays and are
-- unpacked with json_each so that a batch is one statement.

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at) VALUES (:version, :name, :now);

-- name: register_task
INSERT INTO tidegate_tasks (
    name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline, updated_at)
VALUES (:name, :queue, :priority, :tags, :max_attempts, :retry_backoff, :timeout, :dispatch_deadline, :now)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, tags = excluded.tags,
    max_attempts = excluded.max_attempts, retry_backoff = excluded.retry_backoff,
    timeout = excluded.timeout, dispatch_deadline = excluded.dispatch_deadline, updated_at = excluded.updated_at;

-- name: get_task
SELECT name, queue, priority, tags, max_attempts, retry_backoff, timeout, dispatch_deadline
FROM tidegate_tasks WHERE name = :name;

-- name: enqueue
INSERT INTO tidegate_runs (
    id, task, queue, partition_key, status, priority, args, tags, concurrency_key, attempt, max_attempts,
    retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at)
VALUES (
    :id, :task, :queue, :partition_key, 'queued', :priority, :args, :tags, :concurrency_key, 0, :max_attempts,
    :retry_backoff, :timeout, :now, :now, :now + :delay, :now + :deadline);

-- name: insert_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (:run_id, NULL, :type, :metadata, :now);

-- name: record_starts
UPDATE tidegate_runs SET started_at = :now
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: record_outcomes
-- Fenced on (id, attempt, running): an outcome from an attempt that was taken
-- over matches no row and is reported back as fenced out. A run whose cancel
-- was requested ends canceled unless it completed: a retry must not undo it.
UPDATE tidegate_runs SET
    status = CASE WHEN tidegate_runs.cancel_requested = 1 AND o.status IN ('queued', 'failed') THEN 'canceled'
                  ELSE o.status END,
    result = o.result,
    error = o.error,
    finished_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN NULL ELSE :now END,
    queued_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN :now
                     ELSE tidegate_runs.queued_at END,
    scheduled_at = CASE WHEN o.status = 'queued' AND tidegate_runs.cancel_requested = 0 THEN :now + o.delay
                        ELSE tidegate_runs.scheduled_at END,
    worker_id = NULL,
    lease_expires_at = NULL,
    cancel_requested = 0,
    suspect = 0  -- a suspect whose attempt reported an outcome did not kill its worker: cleared
FROM (SELECT json_extract(value, '$.id') AS id,
             json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.status') AS status,
             json_extract(value, '$.result') AS result,
             json_extract(value, '$.error') AS error,
             coalesce(json_extract(value, '$.delay'), 0) AS delay
      FROM json_each(:outcomes)) AS o
WHERE tidegate_runs.id = o.id AND tidegate_runs.attempt = o.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status;

-- name: cancel_requests
SELECT id, attempt FROM tidegate_runs
WHERE worker_id = :worker AND status = 'running' AND cancel_requested = 1;

-- name: claim_window
-- One queue at a time so that the claim index delivers rows in order: the
-- cost is the window, not the backlog.
SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND +scheduled_at <= :now
  AND (deadline_at IS NULL OR deadline_at > :now)
  AND NOT EXISTS (SELECT 1 FROM json_each(:excluded) AS x
                  WHERE json_extract(tidegate_runs.tags, '$."' || json_extract(x.value, '$[0]') || '"')
                        = json_extract(x.value, '$[1]'))
ORDER BY priority DESC, scheduled_at, id
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
SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND partition_key = :partition AND +scheduled_at <= :now
  AND (deadline_at IS NULL OR deadline_at > :now)
  AND NOT EXISTS (SELECT 1 FROM json_each(:excluded) AS x
                  WHERE json_extract(tidegate_runs.tags, '$."' || json_extract(x.value, '$[0]') || '"')
                        = json_extract(x.value, '$[1]'))
ORDER BY priority DESC, scheduled_at, id
LIMIT :limit;

-- name: claim_runs
UPDATE tidegate_runs SET
    status = 'running', attempt = attempt + 1, worker_id = :worker,
    lease_expires_at = :now + :lease, started_at = NULL, block_reason = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'queued'
RETURNING id, task, queue, args, attempt, max_attempts, retry_backoff, timeout, suspect;

-- name: next_due
-- Only runs not yet due: a due run that is blocked waits for a release (a wake-up), not a timer.
SELECT min(scheduled_at) - :now FROM tidegate_runs WHERE status = 'queued' AND queue = :queue AND scheduled_at > :now;

-- name: renew_leases
UPDATE tidegate_runs SET lease_expires_at = :now + :lease
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong (its event says charged: false). It keeps
-- its place in the queue and its suspect flag. A run whose cancel was asked ends canceled.
UPDATE tidegate_runs SET
    status = CASE WHEN cancel_requested = 1 THEN 'canceled' ELSE 'queued' END,
    finished_at = CASE WHEN cancel_requested = 1 THEN :now ELSE NULL END,
    max_attempts = max_attempts + 1,
    worker_id = NULL, lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status, tidegate_runs.suspect;

-- name: take_lock
INSERT INTO tidegate_locks (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < :now OR tidegate_locks.holder = excluded.holder
RETURNING holder;

-- name: sweep_lost
-- The running attempts known lost, with what the rescue rule (domain/recovery.py)
-- needs: their lease lapsed, or their worker's registry heartbeat stopped (an
-- orphan: gone whatever its leases say). `beside` counts the other runs of the
-- same worker still running or already rescued from it (by this sweep or an
-- earlier one): a run that shared its lost worker is not charged.
SELECT r.id, r.attempt, r.max_attempts, r.worker_id, r.cancel_requested, r.suspect,
       r.started_at IS NOT NULL AS started, r.lease_expires_at < :now AS lapsed,
       (SELECT count(*) FROM tidegate_runs AS o
        WHERE o.worker_id = r.worker_id AND o.status = 'running' AND o.id <> r.id)
       + (SELECT count(*) FROM tidegate_runs AS o WHERE o.rescued_from = r.worker_id AND o.id <> r.id) AS beside
FROM tidegate_runs AS r
WHERE r.status = 'running'
  AND (r.lease_expires_at < :now
       OR EXISTS (SELECT 1 FROM tidegate_workers AS w WHERE w.id = r.worker_id AND w.expires_at < :now))
ORDER BY r.id;

-- name: sweep_recover
-- Writes the rescue's verdicts: re-queued (keeping its place: scheduled_at is
-- not moved), failed or canceled, with max_attempts grown when the attempt was
-- not charged, the suspect flag and the worker it was rescued from.
UPDATE tidegate_runs SET
    status = v.status, error = coalesce(v.error, tidegate_runs.error),
    finished_at = CASE WHEN v.status = 'queued' THEN NULL ELSE :now END,
    max_attempts = v.max_attempts, suspect = v.suspect, rescued_from = v.worker,
    worker_id = NULL, lease_expires_at = NULL
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.status') AS status, json_extract(value, '$.error') AS error,
             json_extract(value, '$.max_attempts') AS max_attempts, json_extract(value, '$.suspect') AS suspect,
             json_extract(value, '$.worker') AS worker
      FROM json_each(:verdicts)) AS v
WHERE tidegate_runs.id = v.id AND tidegate_runs.attempt = v.attempt AND +tidegate_runs.status = 'running'
RETURNING tidegate_runs.id, tidegate_runs.status;

-- name: cancel_queued
UPDATE tidegate_runs SET status = 'canceled', finished_at = :now
WHERE id = :id AND status = 'queued'
RETURNING id;

-- name: request_cancel
UPDATE tidegate_runs SET cancel_requested = 1
WHERE id = :id AND status = 'running'
RETURNING id;

-- name: run_status
SELECT status FROM tidegate_runs WHERE id = :id;

-- name: pending_count
SELECT (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue)
     + (SELECT count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue);

-- name: get_run
SELECT * FROM tidegate_runs WHERE id = :id;

-- name: list_runs
SELECT * FROM tidegate_runs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: run_events
SELECT id, run_id, step_key, type, metadata, at FROM tidegate_events
WHERE run_id = :run_id ORDER BY id;

-- name: status_counts
SELECT status, count(*) FROM tidegate_runs WHERE (:queue IS NULL OR queue = :queue) GROUP BY status;

-- name: rules_version
SELECT value FROM tidegate_settings WHERE name = 'rules_version';

-- name: bump_rules_version
UPDATE tidegate_settings SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT), updated_at = :now
WHERE name = 'rules_version';

-- name: load_run_queue
SELECT value FROM tidegate_settings WHERE name = 'run_queue';

-- name: load_queues
SELECT config FROM tidegate_queues ORDER BY name;

-- name: load_overrides
SELECT target, "limit", version, updated_at FROM tidegate_limit_overrides ORDER BY target;

-- name: register_queue
INSERT INTO tidegate_queues (name, config, updated_at) VALUES (:name, :config, :now)
ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at
WHERE tidegate_queues.config <> excluded.config
RETURNING name;

-- name: register_implied_queue
-- A queue a task uses without declaring it: known, with no limits, unless declared elsewhere.
INSERT INTO tidegate_queues (name, config, updated_at) VALUES (:name, :config, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: register_run_queue
INSERT INTO tidegate_settings (name, value, updated_at) VALUES ('run_queue', :value, :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
WHERE tidegate_settings.value <> excluded.value
RETURNING name;

-- name: scope_usage
-- Run-level scopes only: a run's own holders (holder = its id); steps' pool
-- and window slots are shown by `pools`.
SELECT scope, sum(slots) FROM tidegate_holders WHERE holder = run_id GROUP BY scope;

-- name: local_usage
SELECT queue, partition_key, count(*) FROM tidegate_runs
WHERE worker_id = :worker AND status = 'running'
GROUP BY queue, partition_key;

-- name: lane_load
-- Running runs per partition of a fair queue: the least-served partition goes first.
SELECT partition_key, count(*) FROM tidegate_runs WHERE status = 'running' AND queue = :queue GROUP BY partition_key;

-- name: insert_holders
INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), :worker, 1, :now, :now + :lease
FROM json_each(:holders);

-- name: release_holders
DELETE FROM tidegate_holders WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: renew_holders
-- A run's own holders and its fan-out window slots share the run's lease; pool
-- holders keep their pool's lease, renewed by their step (renew_slots).
UPDATE tidegate_holders SET expires_at = :now + :lease
WHERE run_id IN (SELECT value FROM json_each(:ids)) AND worker_id = :worker
  AND NOT (scope >= 'pool:' AND scope < 'pool;');

-- name: set_block_reasons
UPDATE tidegate_runs SET block_reason = json_extract(b.value, '$[1]')
FROM json_each(:reasons) AS b
WHERE tidegate_runs.id = json_extract(b.value, '$[0]') AND +tidegate_runs.status = 'queued';

-- name: leaked_holders
-- Holders whose run no longer runs that attempt. Releases happen in the same
-- transaction as every status change, so this should always be empty.
SELECT h.scope, h.holder, h.run_id, h.attempt, h.slots FROM tidegate_holders AS h
LEFT JOIN tidegate_runs AS r ON r.id = h.run_id
WHERE r.id IS NULL OR r.status <> 'running' OR r.attempt <> h.attempt;

-- name: delete_holder
DELETE FROM tidegate_holders WHERE scope = :scope AND holder = :holder;

-- name: scope_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = :scope ORDER BY claimed_at, holder;

-- name: list_queued
SELECT * FROM tidegate_runs
WHERE status = 'queued' AND (:queue IS NULL OR queue = :queue)
ORDER BY priority DESC, scheduled_at, id
LIMIT :limit;

-- name: queue_position
SELECT
    (SELECT count(*) FROM tidegate_runs
     WHERE status = 'queued' AND queue = :queue
       AND (priority > :priority OR (priority = :priority
            AND (scheduled_at < :scheduled_at OR (scheduled_at = :scheduled_at AND id < :id))))),
    (SELECT count(*) FROM tidegate_runs WHERE status = 'queued' AND queue = :queue);

-- name: get_override
SELECT "limit", version FROM tidegate_limit_overrides WHERE target = :target;

-- name: set_override
INSERT INTO tidegate_limit_overrides (target, "limit", version, updated_at) VALUES (:target, :limit, 1, :now)
ON CONFLICT (target) DO UPDATE SET
    "limit" = excluded."limit", version = tidegate_limit_overrides.version + 1, updated_at = excluded.updated_at
RETURNING version;

-- name: reset_override
DELETE FROM tidegate_limit_overrides WHERE target = :target RETURNING "limit", version;

-- --- pools and steps ----------------------------------------------------------
-- Step holders: scope 'pool:NAME' or 'fanout:RUN/MAP', holder 'RUN/STEPKEY'.
-- Pool scopes are selected as the key range ['pool:', 'pool;') (';' follows ':'),
-- which the primary key (scope, holder) serves.

-- name: step_fence
-- The run as this attempt sees it, only while the attempt still owns it.
SELECT lease_expires_at FROM tidegate_runs WHERE id = :run_id AND attempt = :attempt AND status = 'running';

-- name: insert_step_event
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
VALUES (:run_id, :step_key, :type, :metadata, :now);

-- name: set_pool_limit
INSERT INTO tidegate_pools (name, "limit", lease_seconds, updated_at) VALUES (:name, :limit, :lease, :now)
ON CONFLICT (name) DO UPDATE SET
    "limit" = excluded."limit", lease_seconds = excluded.lease_seconds, updated_at = excluded.updated_at;

-- name: set_pool_limit_before
SELECT "limit", lease_seconds FROM tidegate_pools WHERE name = :name;

-- name: pools
-- Configured pools, and unconfigured ones that are held or waited for. Pending
-- counts steps waiting for the pool whose attempt still owns its run.
WITH claimed AS (
    SELECT substr(scope, 6) AS name, sum(slots) AS claimed FROM tidegate_holders
    WHERE scope >= 'pool:' AND scope < 'pool;'
    GROUP BY scope
), pending AS (
    SELECT substr(w.key, 6) AS name, count(*) AS pending
    FROM tidegate_steps AS s
    JOIN tidegate_runs AS r ON r.id = s.run_id AND r.status = 'running' AND r.attempt = s.attempt,
         json_each(s.waiting_for) AS w
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
ORDER BY n.name;

-- name: pool_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = 'pool:' || :pool ORDER BY claimed_at, holder;

-- name: acquire_slots_limits
-- The configured pools among the scopes asked for: name, limit, lease.
SELECT name, "limit", lease_seconds FROM tidegate_pools
WHERE name IN (SELECT substr(value, 6) FROM json_each(:scopes) WHERE value >= 'pool:' AND value < 'pool;');

-- name: acquire_slots_usage
-- Per scope asked for: the slots in use (the sum of every holder) and, as a
-- JSON object {holder: slots}, what the asking steps hold of it already
-- (re-asking for that is a grant).
SELECT scope, sum(slots),
       json_group_object(holder, slots) FILTER (WHERE holder IN (SELECT value FROM json_each(:holders)))
FROM tidegate_holders
WHERE scope IN (SELECT value FROM json_each(:scopes))
GROUP BY scope;

-- name: acquire_slots
-- One holder row per scope; a row this holder already has is taken over.
INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
SELECT json_extract(value, '$[0]'), :holder, :run_id, :attempt, :worker, json_extract(value, '$[1]'),
       :now, json_extract(value, '$[2]')
FROM json_each(:holders) WHERE true
ON CONFLICT (scope, holder) DO UPDATE SET
    run_id = excluded.run_id, attempt = excluded.attempt, worker_id = excluded.worker_id,
    slots = excluded.slots, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at;

-- name: acquire_slots_granted
-- A granted step waits no more.
UPDATE tidegate_steps SET waiting_for = NULL
WHERE run_id = :run_id AND step_key = :step_key AND waiting_for IS NOT NULL;

-- name: acquire_slots_waiting
-- Mark the step waiting (creating its row if needed); returns a row only when
-- it was not waiting yet under this attempt: the first wait gets the event.
INSERT INTO tidegate_steps (run_id, step_key, status, waiting_for, attempt)
VALUES (:run_id, :step_key, 'pending', :needs, :attempt)
ON CONFLICT (run_id, step_key) DO UPDATE SET waiting_for = excluded.waiting_for, attempt = excluded.attempt
WHERE tidegate_steps.waiting_for IS NULL OR tidegate_steps.attempt <> excluded.attempt
   OR tidegate_steps.waiting_for <> excluded.waiting_for
RETURNING step_key;

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
    SELECT key AS scope, value AS slots FROM json_each(:needs) WHERE key >= 'pool:' AND key < 'pool;'
), used AS (
    SELECT a.slots, p."limit", (SELECT coalesce(sum(h.slots), 0) FROM tidegate_holders AS h WHERE h.scope = a.scope) AS used
    FROM asked AS a JOIN tidegate_pools AS p ON p.name = substr(a.scope, 6)
)
SELECT
    EXISTS (
        SELECT 1 FROM tidegate_runs AS r
        JOIN tidegate_steps AS s ON s.run_id = r.id AND s.attempt = r.attempt
        WHERE r.status = 'running' AND r.id <> :run_id AND s.waiting_for IS NOT NULL
          AND EXISTS (SELECT 1 FROM json_each(s.waiting_for) AS w WHERE w.key IN (SELECT scope FROM asked))
    ) AS contested,
    EXISTS (SELECT 1 FROM used WHERE used > "limit") AS over_limit,
    EXISTS (SELECT 1 FROM used WHERE used + slots > "limit") AS full,
    EXISTS (
        SELECT 1 FROM tidegate_steps
        WHERE run_id = :run_id AND step_key = :step_key AND attempt = :attempt AND waiting_for IS NOT NULL
    ) AS waiting;

-- name: hand_on_holders
-- A finished step's holders of the successor's scopes become the successor's:
-- a slot changes hands, the sum in use does not. Each is leased anew (a pool
-- by its lease; a window keeps the run's). Only rows of the slots asked for,
-- of the finished step's attempt, and of scopes the successor holds nothing of.
-- Returns each moved scope, its slots and its new lease in seconds.
UPDATE tidegate_holders SET holder = :to_holder, worker_id = :worker, claimed_at = :now,
    expires_at = CASE WHEN scope >= 'pool:' AND scope < 'pool;'
        THEN :now + coalesce((SELECT lease_seconds FROM tidegate_pools WHERE name = substr(tidegate_holders.scope, 6)),
                             :default_lease)
        ELSE expires_at END
WHERE holder = :from_holder AND attempt = :attempt
  AND slots = (SELECT n.value FROM json_each(:needs) AS n WHERE n.key = tidegate_holders.scope)
  AND NOT EXISTS (SELECT 1 FROM tidegate_holders AS b WHERE b.holder = :to_holder AND b.scope = tidegate_holders.scope)
RETURNING scope, slots, expires_at - claimed_at;

-- name: acquire_slots_unconfigured_seen
SELECT 1 FROM tidegate_events
WHERE run_id = :run_id AND type = 'PoolUnconfigured' AND json_extract(metadata, '$.pool') = :pool
LIMIT 1;

-- name: renew_slots
-- Each pool holder of the step, by its pool's lease (an unconfigured pool's default).
UPDATE tidegate_holders SET expires_at = :now + coalesce(
        (SELECT lease_seconds FROM tidegate_pools WHERE name = substr(tidegate_holders.scope, 6)), :default_lease)
WHERE holder = :holder AND attempt = :attempt AND scope >= 'pool:' AND scope < 'pool;'
RETURNING scope;

-- name: release_slots
DELETE FROM tidegate_holders
WHERE holder = :holder AND attempt = :attempt AND scope >= 'pool:' AND scope < 'pool;'
RETURNING scope, slots;

-- name: record_steps
-- Upsert each step; a completed step is a checkpoint and stays as it is.
-- Returns the rows written (their events follow).
INSERT INTO tidegate_steps (
    run_id, step_key, map_key, item_index, status, output, error, waiting_for, attempt, started_at, finished_at)
SELECT :run_id, json_extract(value, '$.step_key'), json_extract(value, '$.map_key'),
       json_extract(value, '$.item_index'), json_extract(value, '$.status'), json_extract(value, '$.output'),
       json_extract(value, '$.error'), NULL, :attempt,
       CASE WHEN json_extract(value, '$.status') = 'running' THEN :now END,
       CASE WHEN json_extract(value, '$.status') IN ('completed', 'failed') THEN :now END
FROM json_each(:steps) WHERE true
ON CONFLICT (run_id, step_key) DO UPDATE SET
    map_key = coalesce(excluded.map_key, tidegate_steps.map_key),
    item_index = coalesce(excluded.item_index, tidegate_steps.item_index),
    status = excluded.status, output = excluded.output, error = excluded.error,
    waiting_for = CASE WHEN excluded.status = 'pending' AND tidegate_steps.attempt = excluded.attempt
                       THEN tidegate_steps.waiting_for END,
    attempt = excluded.attempt,
    started_at = CASE excluded.status WHEN 'running' THEN excluded.started_at WHEN 'pending' THEN NULL
                      ELSE tidegate_steps.started_at END,
    finished_at = excluded.finished_at
WHERE tidegate_steps.status <> 'completed'
RETURNING step_key, status, map_key, item_index, error;

-- name: record_steps_release
-- A finished step frees every slot it still holds (its window slot included).
DELETE FROM tidegate_holders
WHERE holder = :holder AND attempt = :attempt
RETURNING scope, slots;

-- name: run_steps
SELECT run_id, step_key, map_key, item_index, status, output, error, waiting_for, attempt, started_at, finished_at
FROM tidegate_steps WHERE run_id = :run_id ORDER BY rowid;

-- name: next_map_item_used
SELECT coalesce(sum(slots), 0) FROM tidegate_holders WHERE scope = :scope;

-- name: next_map_item
-- The lowest-index item not finished and not taken by this attempt.
UPDATE tidegate_steps SET status = 'running', attempt = :attempt, started_at = NULL, finished_at = NULL,
    output = NULL, error = NULL, waiting_for = NULL
WHERE run_id = :run_id AND step_key = (
    SELECT step_key FROM tidegate_steps
    WHERE run_id = :run_id AND map_key = :map_key
      AND (status = 'pending' OR (status = 'running' AND attempt <> :attempt))
    ORDER BY item_index LIMIT 1)
RETURNING run_id, step_key, map_key, item_index, status, output, error, waiting_for, attempt, started_at,
          finished_at;

-- name: next_map_item_hold
INSERT INTO tidegate_holders (scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at)
VALUES (:scope, :holder, :run_id, :attempt, :worker, 1, :now, :expires)
ON CONFLICT (scope, holder) DO UPDATE SET
    attempt = excluded.attempt, worker_id = excluded.worker_id, claimed_at = excluded.claimed_at,
    expires_at = excluded.expires_at;

-- name: sweep_step_holders
-- Every holder of each step that has a holder whose lease expired: a step that
-- lost one of its pools lost its claim, so it never keeps only part of them.
SELECT scope, holder, run_id, attempt, slots FROM tidegate_holders
WHERE holder IN (SELECT holder FROM tidegate_holders WHERE expires_at < :now AND holder <> run_id)
ORDER BY holder, scope;

-- name: sweep_step_holders_delete
DELETE FROM tidegate_holders WHERE holder IN (SELECT value FROM json_each(:holders));

-- name: active_runs
SELECT count(*) FROM tidegate_runs WHERE status IN ('queued', 'running') AND (:queue IS NULL OR queue = :queue);

-- name: recent_completions
SELECT count(*) FROM tidegate_runs
WHERE finished_at >= :since AND status IN ('completed', 'failed', 'canceled') AND (:queue IS NULL OR queue = :queue);

-- name: missed_deadlines
SELECT id, queue, submitted_at, deadline_at FROM tidegate_runs
WHERE status = 'queued' AND deadline_at IS NOT NULL AND deadline_at <= :now;

-- name: fail_missed_deadline
UPDATE tidegate_runs SET
    status = 'failed', finished_at = :now, block_reason = NULL,
    error = 'capacity: still queued ' || CAST(round(:now - submitted_at) AS INTEGER)
            || 's after submission, past its dispatch deadline; no worker could take it in time'
WHERE id = :id AND status = 'queued'
RETURNING id, attempt, error;

-- name: register_worker
INSERT INTO tidegate_workers (id, rank, capacity, queues, fill_order, started_at, heartbeat_at, expires_at)
VALUES (:id, :rank, :capacity, :queues, :fill_order, :now, :now, :now + :ttl)
ON CONFLICT (id) DO UPDATE SET
    rank = excluded.rank, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: live_worker_ranks
SELECT id, rank FROM tidegate_workers WHERE expires_at >= :now;

-- name: heartbeat_worker
UPDATE tidegate_workers SET heartbeat_at = :now, expires_at = :now + :ttl WHERE id = :id RETURNING rank;

-- name: deregister_worker
DELETE FROM tidegate_workers WHERE id = :id;

-- name: release_locks
-- A leaving worker hands its duties (the sweeper's turn) to the others at once.
DELETE FROM tidegate_locks WHERE holder = :id;

-- name: worker_fill_state
-- Live workers with their running runs, for the fill order.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order,
       (SELECT count(*) FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS running
FROM tidegate_workers AS w
WHERE w.expires_at >= :now;

-- name: forget_dead_workers
-- Registry rows whose heartbeat stopped and who hold no running run any more.
DELETE FROM tidegate_workers
WHERE expires_at < :now
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.worker_id = tidegate_workers.id AND r.status = 'running');

-- name: take_turn
-- A duty done at most once per interval across all workers (unlike take_lock, the holder does not renew).
INSERT INTO tidegate_locks (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < :now
RETURNING holder;
