-- SQLite queries of leases.py: lease renewals, hand-backs and the sweep.
-- Conventions (parameters, clock, batches): database.sql.

-- name: renew_leases
UPDATE tidegate_runs SET lease_expires_at = :now + :lease
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt;

-- name: hand_back_charges
-- What the claim charged the rates of the attempts about to be handed back that never started
-- (read first: the update below clears it). Given back by hand_back (storage/shared/rate_charges.py).
SELECT tidegate_runs.rate_charge
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
JOIN tidegate_runs ON tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
WHERE +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
  AND tidegate_runs.started_at IS NULL AND tidegate_runs.rate_charge IS NOT NULL;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong (its event says charged: false). It keeps
-- its place in the queue and its suspect flag. A run whose cancel was asked takes
-- :if_canceled (domain.transitions.settle). An attempt that never started gives
-- its rate charge back (hand_back_charges): it is cleared here.
UPDATE tidegate_runs SET
    rate_charge = iif(started_at IS NULL, NULL, rate_charge),
    status = iif(cancel_requested, :if_canceled, 'queued'),
    finished_at = iif(iif(cancel_requested, :if_canceled, 'queued') = 'queued', NULL, :now),
    max_attempts = min(max_attempts, :most_attempts - 1) + 1,  -- domain.integers.grown
    worker_shutdowns = worker_shutdowns + 1,
    worker_id = NULL, lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
      FROM json_each(:fences)) AS f
WHERE tidegate_runs.id = f.id AND tidegate_runs.attempt = f.attempt
  AND +tidegate_runs.status = 'running' AND +tidegate_runs.worker_id = :worker
RETURNING tidegate_runs.id, tidegate_runs.attempt, tidegate_runs.status, tidegate_runs.suspect;

-- name: report_cost_charge
-- The rate charge of this worker's running attempt (report_cost corrects it).
SELECT rate_charge FROM tidegate_runs
WHERE id = :id AND attempt = :attempt AND status = 'running' AND worker_id = :worker;

-- name: report_cost_write
UPDATE tidegate_runs SET rate_charge = :charge WHERE id = :id AND attempt = :attempt;

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
-- earlier one): a run that shared its lost worker is not charged. Times are
-- seconds since the epoch, as on PostgreSQL.
SELECT r.id, r.attempt, r.max_attempts, r.worker_id, r.cancel_requested, r.suspect,
       r.started_at IS NOT NULL AS started, r.lease_expires_at < :now AS lapsed,
       -- when it was lost: its worker's last heartbeat, or its lease's expiry if that came first
       min(coalesce((SELECT w.heartbeat_at FROM tidegate_workers AS w WHERE w.id = r.worker_id), r.lease_expires_at),
           r.lease_expires_at) AS lost_at,
       (SELECT w.heartbeat_at FROM tidegate_workers AS w WHERE w.id = r.worker_id) AS last_heartbeat,
       (SELECT count(*) FROM tidegate_runs AS o
        WHERE o.worker_id = r.worker_id AND o.status = 'running' AND o.id <> r.id)
       + (SELECT count(*) FROM tidegate_runs AS o WHERE o.rescued_from = r.worker_id AND o.id <> r.id) AS beside
FROM tidegate_runs AS r
WHERE r.status = 'running'
  AND (r.lease_expires_at < :now
       OR EXISTS (SELECT 1 FROM tidegate_workers AS w WHERE w.id = r.worker_id AND w.expires_at < :now))
ORDER BY +r.id;  -- sorted after the filter: ordering by the key index would scan every run, queued ones too

-- name: sweep_recover
-- Writes the rescue's verdicts: re-queued (keeping its place: scheduled_at is
-- not moved), failed or canceled, with max_attempts grown (and counted in
-- lost_workers) when the attempt was not charged, the suspect flag and group, and the worker it was rescued from.
UPDATE tidegate_runs SET
    status = v.status, error = coalesce(v.error, tidegate_runs.error),
    finished_at = CASE WHEN v.status = 'queued' THEN NULL ELSE :now END,
    max_attempts = v.max_attempts, lost_workers = lost_workers + v.uncharged, suspect = v.suspect, suspect_group = v.suspect_group, rescued_from = v.worker,
    worker_id = NULL, lease_expires_at = NULL
FROM (SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.attempt') AS attempt,
             json_extract(value, '$.status') AS status, json_extract(value, '$.error') AS error,
             json_extract(value, '$.max_attempts') AS max_attempts, json_extract(value, '$.uncharged') AS uncharged,
             json_extract(value, '$.suspect') AS suspect,
             json_extract(value, '$.group') AS suspect_group, json_extract(value, '$.worker') AS worker
      FROM json_each(:verdicts)) AS v
WHERE tidegate_runs.id = v.id AND tidegate_runs.attempt = v.attempt AND +tidegate_runs.status = 'running'
RETURNING tidegate_runs.id, tidegate_runs.status;

-- name: renew_leases_holders
-- A run's own holders and its fan-out window slots share the run's lease; pool
-- holders keep their pool's lease, renewed by their step (renew_slots).
UPDATE tidegate_holders SET expires_at = :now + :lease
WHERE run_id IN (SELECT value FROM json_each(:ids)) AND worker_id = :worker
  AND NOT (scope >= 'pool:' AND scope < 'pool;');

-- name: sweep_leaks
-- Holders whose run no longer runs (or waits in) that attempt. Releases happen in the same
-- transaction as every status change, so this should always be empty.
SELECT h.scope, h.holder, h.run_id, h.attempt, h.slots FROM tidegate_holders AS h
LEFT JOIN tidegate_runs AS r ON r.id = h.run_id
WHERE r.id IS NULL OR r.status NOT IN ('running', 'waiting') OR r.attempt <> h.attempt;

-- name: sweep_leaks_delete
DELETE FROM tidegate_holders WHERE scope = :scope AND holder = :holder;

-- name: sweep_deadlines
-- A paused queue's runs are not failed: its paused time does not count (domain/deadlines.py).
SELECT id, queue, submitted_at, deadline_at FROM tidegate_runs
WHERE status = 'queued' AND deadline_at IS NOT NULL AND deadline_at <= :now
  AND queue NOT IN (SELECT name FROM tidegate_queues WHERE paused);

-- name: sweep_deadlines_fail
-- :error is domain.transitions.deadline_error of the time it waited.
UPDATE tidegate_runs SET
    status = 'failed', finished_at = :now, block_reason = NULL, error = :error
WHERE id = :id AND status = 'queued'
RETURNING id, attempt, error;

-- name: forget_dead_workers
-- Registry rows whose heartbeat stopped and who hold no running run any more.
DELETE FROM tidegate_workers
WHERE expires_at < :now
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.worker_id = tidegate_workers.id AND r.status = 'running');
