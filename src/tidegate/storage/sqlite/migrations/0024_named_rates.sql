-- Named rates (domain/named_rates.py): a rate declared by name like a pool, paid by the steps
-- that name it in the transaction that takes their pool slots. Like a pool, the code's windows
-- and a live override are kept apart; `rates` is the windows in force (JSON [{limit, per, burst}]),
-- which every step claim reads. Their GCRA states are tidegate_rate_states rows of scope 'rate:@NAME'.
CREATE TABLE tidegate_named_rates (
    name       TEXT PRIMARY KEY,
    rates      TEXT NOT NULL,
    declared   TEXT,
    override   TEXT,
    version    INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);

-- What the step's last grant charged its named rates ([[scope, window_ns, before, after, cost,
-- step, at], ...]): given back when its slots are released before it started (a refund).
ALTER TABLE tidegate_steps ADD COLUMN rate_charge TEXT;
