-- PostgreSQL queries of leases.py: lease renewals, hand-backs and the sweep.
-- Conventions (parameters, clock, batches): database.sql.

-- name: renew_leases
-- Only the server's clock sets a lease, so a just-renewed lease is never reaped.
-- Locks first, in the order of cycle_reports. The holder rows of a renewed
-- attempt are renewed with it.
WITH locked AS (
    SELECT id FROM tidegate_runs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY depth DESC, id
    FOR UPDATE
), renewed AS (
    UPDATE tidegate_runs AS r SET lease_expires_at = tidegate_now() + make_interval(secs => %(lease)s::double precision)
    FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) AS f(id, attempt), locked AS l
    WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING r.id, r.attempt
), holders AS (
    -- A run's own holders and its fan-out window slots share its lease; pool
    -- holders keep their pool's lease, renewed by their step (renew_slots).
    UPDATE tidegate_holders AS h SET expires_at = tidegate_now() + make_interval(secs => %(lease)s::double precision)
    FROM renewed AS n
    WHERE h.run_id = n.id AND h.worker_id = %(worker)s::text AND NOT (h.scope >= 'pool:' AND h.scope < 'pool;')
)
SELECT id, attempt FROM renewed;

-- name: hand_back
-- A handed-back attempt does not count against max_attempts: the worker is
-- leaving, the run did nothing wrong (its event says charged: false). It keeps
-- its place in the queue and its suspect flag. A run whose cancel was asked
-- ends canceled (domain.transitions.settle; events: domain.events.handed_back). Locks first, in the order of cycle_reports.
-- An attempt that never started gives its rate charge back: returned here (and cleared) for
-- hand_back to give back in the same transaction (storage/shared/rate_charges.py).
WITH locked AS (
    SELECT id, CASE WHEN started_at IS NULL THEN rate_charge END AS refund FROM tidegate_runs
    WHERE id = ANY(%(ids)s::text[]) AND status = 'running' AND worker_id = %(worker)s::text
    ORDER BY depth DESC, id
    FOR UPDATE
), back AS (
    UPDATE tidegate_runs AS r SET
        status = CASE WHEN r.cancel_requested THEN 'canceled' ELSE 'queued' END,
        finished_at = CASE WHEN r.cancel_requested THEN tidegate_now() ELSE NULL END,
        max_attempts = least(r.max_attempts, %(most_attempts)s::integer - 1) + 1,  -- domain.integers.grown
        worker_shutdowns = r.worker_shutdowns + 1,
        worker_id = NULL, lease_expires_at = NULL,
        rate_charge = CASE WHEN r.started_at IS NULL THEN NULL ELSE r.rate_charge END
    FROM unnest(%(ids)s::text[], %(attempts)s::integer[]) WITH ORDINALITY AS f(id, attempt, n), locked AS l
    WHERE r.id = f.id AND l.id = f.id AND r.attempt = f.attempt
      AND r.status = 'running' AND r.worker_id = %(worker)s::text
    RETURNING f.n, r.id, r.attempt, r.status, r.suspect, l.refund
), released AS (
    DELETE FROM tidegate_holders AS h USING back AS b WHERE h.run_id = b.id
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL,
           CASE WHEN status = 'queued' THEN 'RunRequeued' ELSE 'RunCanceled' END,
           jsonb_build_object('attempt', attempt, 'reason', %(reason)s::text, 'worker', %(worker)s::text,
                              'charged', false, 'suspect', suspect),
           tidegate_now()
    FROM back ORDER BY n
)
SELECT id, refund FROM back ORDER BY n;

-- name: report_cost_charge
-- The rate charge of this worker's running attempt, locked (report_cost corrects it).
SELECT rate_charge FROM tidegate_runs
WHERE id = %(id)s::text AND attempt = %(attempt)s::integer AND status = 'running' AND worker_id = %(worker)s::text
FOR UPDATE;

-- name: report_cost_write
UPDATE tidegate_runs SET rate_charge = %(charge)s::text WHERE id = %(id)s::text AND attempt = %(attempt)s::integer;

-- name: take_lock
-- The turn is free when it expired, or already ours (then it is extended).
INSERT INTO tidegate_locks (name, holder, expires_at)
VALUES (%(name)s::text, %(holder)s::text, tidegate_now() + make_interval(secs => %(ttl)s::double precision))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE tidegate_locks.expires_at < tidegate_now() OR tidegate_locks.holder = excluded.holder
RETURNING holder;

-- name: sweep_lost
-- The running attempts known lost, locked, with what the rescue rule
-- (domain/recovery.py) needs. Two ways a run is known lost: its lease lapsed,
-- or its worker's registry heartbeat stopped (an orphan: the worker is gone
-- whatever its leases say, started or claimed-but-never-started alike). A row
-- some transaction holds (a renewal, an outcome) is skipped, not waited on,
-- and swept next time if it is still lost. `beside` counts the other runs of
-- the same worker still running or already rescued from it (by this sweep or
-- an earlier one): a run that shared its lost worker is not charged.
WITH lost AS (
    SELECT r.id, r.attempt, r.max_attempts, r.worker_id, r.cancel_requested, r.suspect,
           r.started_at IS NOT NULL AS started, r.lease_expires_at < tidegate_now() AS lapsed,
           r.lease_expires_at
    FROM tidegate_runs AS r
    WHERE r.status = 'running'
      AND (r.lease_expires_at < tidegate_now()
           OR EXISTS (SELECT 1 FROM tidegate_workers AS w WHERE w.id = r.worker_id AND w.expires_at < tidegate_now()))
    FOR UPDATE OF r SKIP LOCKED
)
SELECT l.id, l.attempt, l.max_attempts, l.worker_id, l.cancel_requested, l.suspect, l.started, l.lapsed,
       -- when it was lost: its worker's last heartbeat, or its lease's expiry if that came first (epoch seconds)
       extract(epoch FROM least(coalesce(w.heartbeat_at, l.lease_expires_at), l.lease_expires_at))::double precision
       AS lost_at,
       extract(epoch FROM w.heartbeat_at)::double precision AS last_heartbeat,
       ((SELECT count(*) FROM tidegate_runs AS o
         WHERE o.worker_id = l.worker_id AND o.status = 'running' AND o.id <> l.id)
        + (SELECT count(*) FROM tidegate_runs AS o WHERE o.rescued_from = l.worker_id AND o.id <> l.id))::integer
       AS beside
FROM lost AS l LEFT JOIN tidegate_workers AS w ON w.id = l.worker_id ORDER BY l.id;

-- name: sweep_recover
-- Writes the rescue's verdicts (locked by sweep_lost in this transaction):
-- re-queued (keeping its place: scheduled_at is not moved), failed or
-- canceled, with `max_attempts` grown (counted in lost_workers) when the attempt was not charged, the
-- suspect flag and group, the worker it was rescued from; frees its holders and
-- records its event. submitted_at and deadline_at are kept: a recovered
-- run's dispatch deadline still counts from submission.
WITH verdicts AS (
    SELECT * FROM jsonb_to_recordset(%(verdicts)s::jsonb) AS v(
        id text, attempt integer, status text, error text, max_attempts integer, uncharged integer, suspect boolean,
        "group" text, worker text, event text, metadata jsonb)
), recovered AS (
    UPDATE tidegate_runs AS r SET
        status = v.status, error = coalesce(v.error, r.error),
        finished_at = CASE WHEN v.status = 'queued' THEN NULL ELSE tidegate_now() END,
        max_attempts = v.max_attempts, lost_workers = r.lost_workers + v.uncharged, suspect = v.suspect, suspect_group = v."group", rescued_from = v.worker,
        worker_id = NULL, lease_expires_at = NULL
    FROM verdicts AS v
    WHERE r.id = v.id AND r.attempt = v.attempt AND r.status = 'running'
    RETURNING r.id, r.status, v.event, v.metadata
), released AS (
    DELETE FROM tidegate_holders AS h USING recovered AS v WHERE h.run_id = v.id
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, event, metadata, tidegate_now() FROM recovered ORDER BY id
)
SELECT id, status FROM recovered ORDER BY id;

-- name: sweep_deadlines
-- Queued runs past their dispatch deadline fail "capacity: ..." (claims no
-- longer see them), the text of domain.transitions.deadline_error (pinned by
-- tests/contract/test_transitions_pinned.py). A row a claimer holds is
-- skipped: it is being taken, or is failed at the next sweep. A paused queue's
-- runs are not failed: its paused time does not count (domain/deadlines.py).
WITH late AS (
    SELECT id FROM tidegate_runs
    WHERE status = 'queued' AND deadline_at <= tidegate_now()
      AND queue NOT IN (SELECT name FROM tidegate_queues WHERE paused)
    FOR UPDATE SKIP LOCKED
), failed AS (
    UPDATE tidegate_runs AS r SET
        status = 'failed', finished_at = tidegate_now(), block_reason = NULL,
        error = 'capacity: still queued ' || round(extract(epoch FROM tidegate_now() - r.submitted_at))::bigint
                || 's after submission, past its dispatch deadline; no worker could take it in time'
    FROM late AS l
    WHERE r.id = l.id AND r.status = 'queued'
    RETURNING r.id, r.attempt, r.error
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunFailed', jsonb_build_object('attempt', attempt, 'error', error), tidegate_now()
    FROM failed ORDER BY id
)
SELECT id FROM failed ORDER BY id;

-- name: forget_dead_workers
-- Registry rows whose heartbeat stopped and who hold no running run any more
-- (sweep_recover, earlier in the same transaction, took their runs back).
DELETE FROM tidegate_workers AS w
WHERE w.expires_at < tidegate_now()
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running');

-- name: sweep_leaks
-- Holders whose run no longer runs that attempt. Releases happen in the same
-- transaction as every status change, so this should always be empty; each
-- one repaired gets a SlotLeakRepaired event. A holder row some transaction
-- holds is skipped (it is being released or renewed right now).
WITH leaked AS (
    SELECT h.scope, h.holder FROM tidegate_holders AS h
    LEFT JOIN tidegate_runs AS r ON r.id = h.run_id
    WHERE r.id IS NULL OR r.status NOT IN ('running', 'waiting') OR r.attempt <> h.attempt
    FOR UPDATE OF h SKIP LOCKED
), repaired AS (
    DELETE FROM tidegate_holders AS h USING leaked AS l
    WHERE h.scope = l.scope AND h.holder = l.holder
    RETURNING h.scope, h.holder, h.run_id, h.attempt, h.slots
), events AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT run_id, NULL, 'SlotLeakRepaired',
           jsonb_build_object('scope', scope, 'slots', slots, 'attempt', attempt), tidegate_now()
    FROM repaired ORDER BY scope, holder
)
SELECT count(*)::integer FROM repaired;
