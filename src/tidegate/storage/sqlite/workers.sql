-- SQLite queries of workers.py: the worker registry, the fill order and the overflow signal.
-- Conventions (parameters, clock, batches): database.sql.

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
-- A leaving worker hands its duties (the sweeper lock) to the others at once.
DELETE FROM tidegate_locks WHERE holder = :id;

-- name: worker_fill_state
-- Live workers with their running runs, for the fill order.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order,
       (SELECT count(*) FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS running
FROM tidegate_workers AS w
WHERE w.expires_at >= :now;

-- name: take_duty
-- A duty done at most once per interval across all workers (unlike take_lock, the holder does not renew).
INSERT INTO tidegate_locks (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < :now
RETURNING holder;

-- name: check_overflow_window
-- The first due runs of a queue in claim order, as claim_window reads them.
SELECT id, task, queue, partition_key, tags, priority, scheduled_at, block_reason, suspect, resumed, rate_key, rate_cost
FROM tidegate_runs
WHERE status = 'queued' AND queue = :queue AND +scheduled_at <= :now
  AND (deadline_at IS NULL OR deadline_at > :now)
ORDER BY resumed DESC, priority DESC, scheduled_at, id
LIMIT :limit;
