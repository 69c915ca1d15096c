-- Rate limits (domain/rates.py): one row per rate scope and window, GCRA's theoretical arrival
-- time in whole nanoseconds of the database's clock; never a row per start. Read and written
-- in the claim's transaction, under the rated queue's claim turn (storage/postgres/claim.py).
CREATE TABLE tidegate_rate_states (
    scope TEXT NOT NULL,
    window_ns BIGINT NOT NULL,
    tat_ns BIGINT NOT NULL,
    PRIMARY KEY (scope, window_ns)
);

-- The partition of its queue's rate a run is charged to, computed at submit from its args like
-- the concurrency partition ('' when the rate is one budget, or the queue has none).
ALTER TABLE tidegate_runs ADD COLUMN rate_key TEXT NOT NULL DEFAULT '';

-- What the claim charged the run's current attempt ([[scope, window_ns, before, after], ...]):
-- a claim undone before the start gives it back (domain/rates.py, refund). NULL: nothing charged.
ALTER TABLE tidegate_runs ADD COLUMN rate_charge TEXT;
