-- Step-level gates: pools and step checkpoints. A step's slots are holder
-- rows in tidegate_holders (scope 'pool:NAME' or 'fanout:RUN/MAP', holder
-- 'RUN/STEPKEY'), so what a pool has in use is still the sum of its holders.

CREATE TABLE tidegate_pools (
    name          TEXT PRIMARY KEY,
    "limit"       INTEGER NOT NULL CHECK ("limit" >= 0),
    lease_seconds REAL NOT NULL CHECK (lease_seconds > 0),
    updated_at    REAL NOT NULL
);

CREATE TABLE tidegate_steps (
    run_id      TEXT NOT NULL,
    step_key    TEXT NOT NULL,
    map_key     TEXT,              -- the map node a mapped item belongs to
    item_index  INTEGER,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    output      TEXT,              -- JSON
    error       TEXT,
    waiting_for TEXT,              -- JSON {scope: slots} while it waits for slots, else NULL
    attempt     INTEGER NOT NULL,  -- the run attempt that last wrote it
    started_at  REAL,
    finished_at REAL,
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX tidegate_steps_map ON tidegate_steps (run_id, map_key, item_index) WHERE map_key IS NOT NULL;
CREATE INDEX tidegate_steps_waiting ON tidegate_steps (run_id) WHERE waiting_for IS NOT NULL;

-- Step holders by holder (acquire, renew, release) and by expiry (the sweep).
CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder);
CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at);
