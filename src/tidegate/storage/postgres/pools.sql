-- PostgreSQL queries of pools.py: pool limits and their holders.
-- Conventions (parameters, clock, batches): database.sql.

-- name: set_pool_limit
-- After the pool's scope row is locked (upsert_scopes, lock_scopes): no claim
-- judged by the old limit is in flight meanwhile. Wakes waiters.
WITH before AS (
    SELECT "limit" FROM tidegate_pools WHERE name = %(name)s::text
), saved AS (
    INSERT INTO tidegate_pools (name, "limit", lease_seconds, updated_at)
    VALUES (%(name)s::text, %(limit)s::integer, %(lease)s::double precision, tidegate_now())
    ON CONFLICT (name) DO UPDATE SET
        "limit" = excluded."limit", lease_seconds = excluded.lease_seconds, updated_at = excluded.updated_at
    RETURNING name, "limit", lease_seconds, updated_at
), changed AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT NULL, NULL, 'LimitChanged',
           jsonb_build_object('target', 'pool:' || name, 'old', (SELECT "limit" FROM before), 'new', "limit",
                              'lease_seconds', lease_seconds),
           tidegate_now()
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
