-- What grew a run's max_attempts beyond its declared budget, by cause (domain/attempts.py):
-- attempts that ended waiting on children, handed back by a worker shutting down, lost with a
-- worker and not charged, and operators' retries. The declared budget is max_attempts less them.
ALTER TABLE tidegate_runs
    ADD COLUMN child_waits integer NOT NULL DEFAULT 0,
    ADD COLUMN worker_shutdowns integer NOT NULL DEFAULT 0,
    ADD COLUMN lost_workers integer NOT NULL DEFAULT 0,
    ADD COLUMN manual_retries integer NOT NULL DEFAULT 0;

-- Runs stored before: each growth left its event (domain/events.py), counted here once.
UPDATE tidegate_runs AS r SET
    child_waits = c.child_waits, worker_shutdowns = c.worker_shutdowns,
    lost_workers = c.lost_workers, manual_retries = c.manual_retries
FROM (
    SELECT run_id,
           count(*) FILTER (WHERE type = 'RunWaiting') AS child_waits,
           count(*) FILTER (WHERE type IN ('RunRequeued', 'RunCanceled')
                              AND metadata->>'reason' = 'worker shutting down') AS worker_shutdowns,
           count(*) FILTER (WHERE type = 'RunRequeued' AND metadata->>'reason' IN ('lease expired', 'worker gone')
                              AND metadata->'charged' = 'false'::jsonb) AS lost_workers,
           count(*) FILTER (WHERE type = 'RunRetriedManually') AS manual_retries
    FROM tidegate_events
    WHERE type IN ('RunWaiting', 'RunRequeued', 'RunCanceled', 'RunRetriedManually')
    GROUP BY run_id
) AS c
WHERE r.id = c.run_id AND r.max_attempts > 1;
