-- A run's own slots are read from its row, not written as holder rows: a claim already writes the
-- run (status running, attempt, worker, lease); it now writes there too the scopes it holds
-- (`held_scopes`, a JSON array of keys) and when it took them (`claimed_at`). A running run holds
-- its `held_scopes`; a waiting run holds what its wait kept (`wait_kept`); any other run holds
-- nothing. So every change of status frees a run's slots by itself, in the statement that makes it
-- (an end, a retry, a hand-back, a rescue, a wait, a cancel), and a claim writes no row but the run's.
-- `tidegate_holders` keeps the holders that are not runs: steps' pool slots and fan-out windows.
-- `tidegate_slot_holders` is every holder, run or step: what a scope's usage is the sum of.

-- No claim or end may write holders while the run holders move into the runs.
LOCK TABLE tidegate_holders IN EXCLUSIVE MODE;

ALTER TABLE tidegate_runs ADD COLUMN held_scopes jsonb;
ALTER TABLE tidegate_runs ADD COLUMN claimed_at timestamptz;

-- The runs in flight take their holders' scopes (a waiting run's are its `wait_kept` already).
UPDATE tidegate_runs AS r SET held_scopes = h.scopes, claimed_at = h.claimed_at
FROM (
    SELECT run_id, attempt, jsonb_agg(scope ORDER BY scope) AS scopes, min(claimed_at) AS claimed_at
    FROM tidegate_holders WHERE holder = run_id GROUP BY run_id, attempt
) AS h
WHERE r.id = h.run_id AND r.attempt = h.attempt AND r.status IN ('running', 'waiting');

-- Their rows go; a run holder of a run that no longer holds it (a leak) stays for the sweep
-- (sweep_leaks), which repairs it with its event as before.
DELETE FROM tidegate_holders AS h USING tidegate_runs AS r
WHERE h.holder = h.run_id AND r.id = h.run_id AND r.attempt = h.attempt AND r.status IN ('running', 'waiting');

CREATE VIEW tidegate_slot_holders AS
SELECT s.scope COLLATE "C" AS scope, r.id AS holder, r.id AS run_id, r.attempt, r.worker_id, 1 AS slots,
       r.claimed_at, r.lease_expires_at AS expires_at
FROM tidegate_runs AS r CROSS JOIN LATERAL jsonb_array_elements_text(r.held_scopes) AS s(scope)
WHERE r.status = 'running'
UNION ALL
SELECT s.scope COLLATE "C", r.id, r.id, r.attempt, NULL, 1, r.claimed_at, '9999-12-31 00:00:00+00'::timestamptz
FROM tidegate_runs AS r CROSS JOIN LATERAL jsonb_array_elements_text(r.wait_kept) AS s(scope)
WHERE r.status = 'waiting'
UNION ALL
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders;
