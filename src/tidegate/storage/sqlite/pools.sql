-- SQLite queries of pools.py: pool limits and their holders.
-- Conventions (parameters, clock, batches): database.sql.

-- name: pool_row
SELECT declared_limit, declared_lease, override_limit, override_lease, version FROM tidegate_pools
WHERE name = :name;

-- name: save_pool
-- The pool's settings and the values in force (which every claim reads).
INSERT INTO tidegate_pools (name, "limit", lease_seconds, updated_at,
                            declared_limit, declared_lease, override_limit, override_lease, version)
VALUES (:name, :limit, :lease, :now, :declared_limit, :declared_lease, :override_limit, :override_lease, :version)
ON CONFLICT (name) DO UPDATE SET
    "limit" = excluded."limit", lease_seconds = excluded.lease_seconds, declared_limit = excluded.declared_limit,
    declared_lease = excluded.declared_lease, override_limit = excluded.override_limit,
    override_lease = excluded.override_lease, version = excluded.version,
    updated_at = CASE WHEN tidegate_pools."limit" = excluded."limit"
                           AND tidegate_pools.lease_seconds = excluded.lease_seconds
                      THEN tidegate_pools.updated_at ELSE excluded.updated_at END
RETURNING updated_at;

-- name: delete_pool
-- Reset with no declaration: the pool is unconfigured (unlimited) again.
DELETE FROM tidegate_pools WHERE name = :name;

-- name: pools
-- Configured pools, and unconfigured ones that a step asked for, holds or waits for,
-- with where the limit in force comes from and the code's limit. Pending
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
    SELECT name FROM tidegate_pools UNION SELECT name FROM tidegate_pools_asked
    UNION SELECT name FROM claimed UNION SELECT name FROM pending
)
SELECT n.name, p."limit", p.lease_seconds, coalesce(c.claimed, 0), coalesce(w.pending, 0),
       p.declared_limit, p.declared_lease, p.override_limit, p.override_lease, coalesce(p.version, 0)
FROM named AS n
LEFT JOIN tidegate_pools AS p ON p.name = n.name
LEFT JOIN claimed AS c ON c.name = n.name
LEFT JOIN pending AS w ON w.name = n.name
ORDER BY n.name;

-- name: pool_waiters
-- The steps `pools` counts pending for one pool, longest waiting first: since is the event their
-- wait recorded (acquire_slots_waiting: the first wait of this attempt for these slots).
SELECT s.run_id, s.step_key, s.attempt, w.value AS slots,
       (SELECT max(e.at) FROM tidegate_events AS e
        WHERE e.run_id = s.run_id AND e.step_key = s.step_key AND e.type = 'StepSlotWaiting') AS since
FROM tidegate_steps AS s
JOIN tidegate_runs AS r ON r.id = s.run_id AND r.status = 'running' AND r.attempt = s.attempt,
     json_each(s.waiting_for) AS w
WHERE s.waiting_for IS NOT NULL AND w.key = 'pool:' || :pool
ORDER BY since NULLS LAST, s.run_id, s.step_key;

-- name: pool_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = 'pool:' || :pool ORDER BY claimed_at, holder;
