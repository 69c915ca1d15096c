-- PostgreSQL queries of pools.py: pool limits and their holders.
-- Conventions (parameters, clock, batches): database.sql.

-- name: pool_row
-- A pool's stored settings, read after its scope row is locked (lock_scopes).
SELECT declared_limit, declared_lease, override_limit, override_lease, version FROM tidegate_pools
WHERE name = %(name)s::text;

-- name: save_pool
-- The pool's settings and the values in force (which every claim reads).
INSERT INTO tidegate_pools AS p (name, "limit", lease_seconds, updated_at,
                                 declared_limit, declared_lease, override_limit, override_lease, version)
VALUES (%(name)s::text, %(limit)s::integer, %(lease)s::double precision, tidegate_now(),
        %(declared_limit)s::integer, %(declared_lease)s::double precision,
        %(override_limit)s::integer, %(override_lease)s::double precision, %(version)s::integer)
ON CONFLICT (name) DO UPDATE SET
    "limit" = excluded."limit", lease_seconds = excluded.lease_seconds, declared_limit = excluded.declared_limit,
    declared_lease = excluded.declared_lease, override_limit = excluded.override_limit,
    override_lease = excluded.override_lease, version = excluded.version,
    updated_at = CASE WHEN (p."limit", p.lease_seconds) = (excluded."limit", excluded.lease_seconds)
                      THEN p.updated_at ELSE excluded.updated_at END
RETURNING updated_at;

-- name: delete_pool
-- Reset with no declaration: the pool is unconfigured (unlimited) again.
DELETE FROM tidegate_pools WHERE name = %(name)s::text;

-- name: pools
-- Configured pools, and unconfigured ones that a step asked for, holds or waits for,
-- with where the limit in force comes from and the code's limit. Pending
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
    SELECT name FROM tidegate_pools UNION SELECT name FROM tidegate_pools_asked
    UNION SELECT name FROM claimed UNION SELECT name FROM pending
)
SELECT n.name, p."limit", p.lease_seconds, coalesce(c.claimed, 0), coalesce(w.pending, 0),
       p.declared_limit, p.declared_lease, p.override_limit, p.override_lease, coalesce(p.version, 0)
FROM named AS n
LEFT JOIN tidegate_pools AS p ON p.name = n.name
LEFT JOIN claimed AS c ON c.name = n.name
LEFT JOIN pending AS w ON w.name = n.name
ORDER BY n.name COLLATE "C";

-- name: pool_waiters
-- The steps `pools` counts pending for one pool, longest waiting first: since is the event their
-- wait recorded (acquire_slots_waiting: the first wait of this attempt for these slots).
SELECT s.run_id, s.step_key, s.attempt, (s.waiting_for ->> ('pool:' || %(pool)s::text))::integer AS slots,
       (SELECT max(e.at) FROM tidegate_events AS e
        WHERE e.run_id = s.run_id AND e.step_key = s.step_key AND e.type = 'StepSlotWaiting') AS since
FROM tidegate_steps AS s
JOIN tidegate_runs AS r ON r.id = s.run_id AND r.status = 'running' AND r.attempt = s.attempt
WHERE s.waiting_for IS NOT NULL AND s.waiting_for ? ('pool:' || %(pool)s::text)
ORDER BY since NULLS LAST, s.run_id, s.step_key;

-- name: pool_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = 'pool:' || %(pool)s::text ORDER BY claimed_at, holder;
