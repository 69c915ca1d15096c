-- PostgreSQL queries of steps.py: step slots, step checkpoints and fan-out windows.
-- Conventions (parameters, clock, batches): database.sql.
--
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
           tidegate_statement_timestamp(),
           coalesce(tidegate_statement_timestamp() + make_interval(secs => w.lease),
                    (SELECT lease_expires_at FROM tidegate_runs WHERE id = %(run_id)s::text))
    FROM wanted AS w ORDER BY w.scope
    ON CONFLICT (scope, holder) DO UPDATE SET
        run_id = excluded.run_id, attempt = excluded.attempt, worker_id = excluded.worker_id,
        slots = excluded.slots, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
), granted AS (
    UPDATE tidegate_steps SET waiting_for = NULL
    WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND waiting_for IS NOT NULL
), asked AS (
    -- `pools list` shows an unconfigured pool once asked for, after its steps are done too.
    INSERT INTO tidegate_pools_asked (name, first_asked_at)
    SELECT u.pool, tidegate_statement_timestamp() FROM unnest(%(unconfigured)s::text[]) AS u(pool)
    ON CONFLICT (name) DO NOTHING
)
INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
SELECT %(run_id)s::text, %(step_key)s::text, type, metadata, tidegate_statement_timestamp()
FROM (
    SELECT 0 AS n, 'StepSlotClaimed' AS type, %(claimed)s::jsonb AS metadata
    UNION ALL
    -- An unconfigured pool is unlimited: said once per run, the first time a step uses it, in the
    -- order the pools were given (a sort on `n` alone is not stable: their events could swap).
    SELECT 1 + u.i, 'PoolUnconfigured',
           jsonb_build_object('pool', u.pool, 'limit', NULL, 'note', %(note)s::text)
    FROM unnest(%(unconfigured)s::text[]) WITH ORDINALITY AS u(pool, i)
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
SELECT %(run_id)s::text, step_key, 'StepSlotWaiting', %(metadata)s::jsonb, tidegate_statement_timestamp() FROM marked;

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
    SET holder = %(to_holder)s::text, worker_id = %(worker)s::text, claimed_at = tidegate_statement_timestamp(),
        expires_at = CASE WHEN h.scope >= 'pool:' AND h.scope < 'pool;'
            THEN tidegate_statement_timestamp() + make_interval(secs => coalesce(
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
    SELECT %(run_id)s::text, e.step_key, e.type, e.metadata, tidegate_statement_timestamp()
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
    SET expires_at = tidegate_now() + make_interval(secs => coalesce(
        (SELECT lease_seconds FROM tidegate_pools WHERE name = substr(h.scope, 6)), %(default_lease)s::double precision))
    FROM locked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.scope
), event AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT %(run_id)s::text, %(step_key)s::text, 'StepSlotRenewed',
           jsonb_build_object('attempt', %(attempt)s::integer,
                              'pools', (SELECT jsonb_agg(substr(scope, 6) ORDER BY scope) FROM renewed)),
           tidegate_now()
    WHERE EXISTS (SELECT 1 FROM renewed)
)
SELECT count(*)::integer FROM renewed;

-- name: release_slots
-- The step's pool holders (locked in scope order first), its event, and a
-- wake-up for whoever waits for them; one row.
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
           tidegate_now()
    WHERE EXISTS (SELECT 1 FROM freed)
), notified AS (
    SELECT pg_notify('tidegate_' || md5(current_schema()), '') WHERE EXISTS (SELECT 1 FROM freed)
)
-- And whether the step keeps a named-rate charge (then the adapter sees whether to give it back).
SELECT (SELECT count(*) FROM notified),
       EXISTS (SELECT 1 FROM tidegate_steps
               WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND rate_charge IS NOT NULL
                 AND EXISTS (SELECT 1 FROM run));

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
           CASE WHEN i.status = 'running' THEN tidegate_now() END,
           CASE WHEN i.status IN ('completed', 'failed') THEN tidegate_now() END
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
    SELECT %(run_id)s::text, step_key, type, metadata, tidegate_now()
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
           %(worker)s::text, 1, tidegate_statement_timestamp(), (SELECT lease_expires_at FROM run)
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
    SELECT DISTINCT holder FROM tidegate_holders WHERE expires_at < tidegate_now() AND holder <> run_id
), locked AS (
    SELECT h.scope, h.holder, h.expires_at FROM tidegate_holders AS h
    WHERE h.holder IN (SELECT holder FROM candidates)
    ORDER BY h.holder, h.scope
    FOR UPDATE SKIP LOCKED
), whole AS (
    SELECT l.holder FROM locked AS l
    GROUP BY l.holder
    HAVING bool_or(l.expires_at < tidegate_now())
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
           tidegate_now()
    FROM freed WHERE scope >= 'pool:' AND scope < 'pool;'
    GROUP BY holder, run_id, attempt
    ORDER BY holder
)
SELECT count(*)::integer FROM freed;

-- name: acquire_rates
-- The windows in force of the named rates the steps pay, read after their scope rows are locked
-- (a name missing is not declared).
SELECT name, rates FROM tidegate_named_rates WHERE name = ANY(%(names)s::text[]);

-- name: acquire_rate_states
-- The GCRA states of those rates' windows ('rate:@NAME'), read after their scope rows are locked,
-- each row with the statement's time (one row of NULLs beside it when no window was ever charged).
WITH clock AS (SELECT extract(epoch FROM tidegate_statement_timestamp())::double precision AS now)
SELECT c.now, s.scope, s.window_ns, s.tat_ns
FROM clock AS c LEFT JOIN tidegate_rate_states AS s ON s.scope = ANY(%(scopes)s::text[]);

-- name: write_rate_states
-- The states a step's charge (or its refund) leaves, under the rates' scope locks.
INSERT INTO tidegate_rate_states AS s (scope, window_ns, tat_ns)
SELECT * FROM unnest(%(scopes)s::text[], %(windows)s::bigint[], %(tats)s::bigint[])
ON CONFLICT (scope, window_ns) DO UPDATE SET tat_ns = excluded.tat_ns;

-- name: keep_rate_charge
-- The charge kept with its step row (created pending if the step has none yet): a release before
-- the step starts gives it back.
INSERT INTO tidegate_steps (run_id, step_key, status, attempt, rate_charge)
VALUES (%(run_id)s::text, %(step_key)s::text, 'pending', %(attempt)s::integer, %(charge)s::jsonb)
ON CONFLICT (run_id, step_key) DO UPDATE SET rate_charge = excluded.rate_charge;

-- name: step_rate_charge
-- A step's kept charge, read to know which rates' scope rows to lock before it is taken.
SELECT rate_charge FROM tidegate_steps
WHERE run_id = %(run_id)s::text AND step_key = %(step_key)s::text AND rate_charge IS NOT NULL;

-- name: take_rate_charge
-- A step's kept charge, taken off its row (so it is given back once at most), with when the step was
-- last recorded running: a refund is for a start that never was. Fenced on the running attempt.
UPDATE tidegate_steps AS s SET rate_charge = NULL
FROM (
    SELECT t.rate_charge, t.started_at FROM tidegate_steps AS t
    JOIN tidegate_runs AS r ON r.id = t.run_id AND r.attempt = %(attempt)s::integer AND r.status = 'running'
    WHERE t.run_id = %(run_id)s::text AND t.step_key = %(step_key)s::text AND t.rate_charge IS NOT NULL
    FOR UPDATE OF t
) AS old
WHERE s.run_id = %(run_id)s::text AND s.step_key = %(step_key)s::text
RETURNING old.rate_charge, extract(epoch FROM old.started_at)::double precision;
