-- PostgreSQL queries of workers.py: the worker registry, the fill order and the overflow signal.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_worker_lock
-- Workers registering at once take ranks one at a time, so no two get the same.
SELECT pg_advisory_xact_lock(hashtext('tidegate:workers'), hashtext(coalesce(current_schema(), '')));

-- name: live_worker_ranks
SELECT id, rank FROM tidegate_workers WHERE expires_at >= tidegate_now();

-- name: register_worker
INSERT INTO tidegate_workers AS w (id, rank, capacity, queues, fill_order, started_at, heartbeat_at, expires_at)
VALUES (%(id)s::text, %(rank)s::integer, %(capacity)s::integer, %(queues)s::jsonb, %(fill_order)s::boolean,
        tidegate_now(), tidegate_now(), tidegate_now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (id) DO UPDATE SET
    rank = excluded.rank, heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at;

-- name: heartbeat_worker
UPDATE tidegate_workers SET heartbeat_at = tidegate_now(), expires_at = tidegate_now() + make_interval(secs => %(ttl)s::double precision)
WHERE id = %(id)s::text
RETURNING rank;

-- name: deregister_worker
DELETE FROM tidegate_workers WHERE id = %(id)s::text;

-- name: release_locks
-- A leaving worker hands its duties (the sweeper lock) to the others at once.
DELETE FROM tidegate_locks WHERE holder = %(id)s::text;

-- name: worker_fill_state
-- Live workers with their running runs, for the fill order and the overflow check.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order,
       (SELECT count(*)::integer FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running')
       AS running
FROM tidegate_workers AS w
WHERE w.expires_at >= tidegate_now();

-- name: check_overflow_window
-- The first due runs of each queue in claim order, as claim_window reads them
-- but without locking them: looking must not hide runs from claimers.
SELECT c.id, c.task, c.queue, c.partition_key, c.tags, c.priority, c.scheduled_at, c.block_reason, c.suspect, c.resumed,
       c.rate_key, c.rate_cost
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost
    FROM tidegate_runs
    WHERE status = 'queued' AND queue = q.name AND scheduled_at <= tidegate_now()
      AND (deadline_at IS NULL OR deadline_at > tidegate_now())
    ORDER BY resumed DESC, priority DESC, scheduled_at, id
    LIMIT %(limit)s::integer
) AS c;

-- name: take_duty
-- A duty done at most once per interval across all workers (unlike take_lock, the holder does not renew).
INSERT INTO tidegate_locks (name, holder, expires_at)
VALUES (%(name)s::text, %(holder)s::text, tidegate_now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < tidegate_now()
RETURNING holder;
