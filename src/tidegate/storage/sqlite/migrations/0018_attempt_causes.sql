-- What grew a run's max_attempts beyond its declared budget, by cause (domain/attempts.py):
-- attempts that ended waiting on children, handed back by a worker shutting down, lost with a
-- worker and not charged, and operators' retries. The declared budget is max_attempts less them.
ALTER TABLE tidegate_runs ADD COLUMN child_waits INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tidegate_runs ADD COLUMN worker_shutdowns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tidegate_runs ADD COLUMN lost_workers INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tidegate_runs ADD COLUMN manual_retries INTEGER NOT NULL DEFAULT 0;

-- Runs stored before: each growth left its event (domain/events.py), counted here once.
UPDATE tidegate_runs SET
    child_waits = (SELECT count(*) FROM tidegate_events AS e
                   WHERE e.run_id = tidegate_runs.id AND e.type = 'RunWaiting'),
    worker_shutdowns = (SELECT count(*) FROM tidegate_events AS e
                        WHERE e.run_id = tidegate_runs.id AND e.type IN ('RunRequeued', 'RunCanceled')
                          AND json_extract(e.metadata, '$.reason') = 'worker shutting down'),
    lost_workers = (SELECT count(*) FROM tidegate_events AS e
                    WHERE e.run_id = tidegate_runs.id AND e.type = 'RunRequeued'
                      AND json_extract(e.metadata, '$.reason') IN ('lease expired', 'worker gone')
                      AND json_extract(e.metadata, '$.charged') = 0),
    manual_retries = (SELECT count(*) FROM tidegate_events AS e
                      WHERE e.run_id = tidegate_runs.id AND e.type = 'RunRetriedManually')
WHERE max_attempts > 1;
