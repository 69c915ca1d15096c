-- SQLite queries of steps.py: step slots, step checkpoints and fan-out windows.
-- Conventions (parameters, clock, batches): database.sql.
--
-- Step holders: scope 'pool:NAME' or 'fanout:RUN/MAP', holder 'RUN/STEPKEY'.
-- Pool scopes are selected as the key range ['pool:', 'pool;') (';' follows ':'),
-- which the primary key (scope, holder) serves.

-- name: step_fence
-- The run as this attempt sees it, only while the attempt still owns it.
SELECT lease_expires_at FROM tidegate_runs WHERE id = :run_id AND attempt = :attempt AND status = 'running';

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

-- name: acquire_slots_asked
-- `pools list` shows an unconfigured pool once asked for, after its steps are done too.
INSERT INTO tidegate_pools_asked (name, first_asked_at) VALUES (:pool, :now) ON CONFLICT (name) DO NOTHING;

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

-- name: acquire_rates
-- The windows in force of the named rates the steps pay (a name missing is not declared).
SELECT name, rates FROM tidegate_named_rates WHERE name IN (SELECT value FROM json_each(:names));

-- name: acquire_rate_states
-- The GCRA states of those rates' windows ('rate:@NAME'): a window never charged has no row.
SELECT scope, window_ns, tat_ns FROM tidegate_rate_states WHERE scope IN (SELECT value FROM json_each(:scopes));

-- name: write_rate_states
-- The states a step's charge (or its refund) leaves, in the transaction that decided it.
INSERT INTO tidegate_rate_states (scope, window_ns, tat_ns)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(:states)
WHERE true
ON CONFLICT (scope, window_ns) DO UPDATE SET tat_ns = excluded.tat_ns;

-- name: keep_rate_charge
-- The charge kept with its step row (created pending if the step has none yet): a release before
-- the step starts gives it back.
INSERT INTO tidegate_steps (run_id, step_key, status, attempt, rate_charge)
VALUES (:run_id, :step_key, 'pending', :attempt, :charge)
ON CONFLICT (run_id, step_key) DO UPDATE SET rate_charge = excluded.rate_charge;

-- name: step_rate_charge
-- A step's kept charge and when it was last recorded running (a refund is for a start that never was).
SELECT rate_charge, started_at FROM tidegate_steps
WHERE run_id = :run_id AND step_key = :step_key AND rate_charge IS NOT NULL;

-- name: take_rate_charge
-- The charge taken off the step row (read first by step_rate_charge): given back once at most.
UPDATE tidegate_steps SET rate_charge = NULL WHERE run_id = :run_id AND step_key = :step_key;
