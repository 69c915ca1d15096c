-- Run-level scopes: every limit is a key whose slots in use are the sum of
-- its holder rows. There is no counter anywhere to drift from them.

ALTER TABLE tidegate_runs ADD COLUMN partition_key TEXT NOT NULL DEFAULT '';
-- JSON list of the saturated scopes that last kept this queued run waiting.
ALTER TABLE tidegate_runs ADD COLUMN block_reason TEXT;

CREATE INDEX tidegate_runs_partition ON tidegate_runs (queue, partition_key, priority DESC, scheduled_at, id)
    WHERE status = 'queued';

CREATE TABLE tidegate_holders (
    scope      TEXT NOT NULL,
    holder     TEXT NOT NULL,      -- the run id (a step adds its key later)
    run_id     TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    worker_id  TEXT,
    slots      INTEGER NOT NULL DEFAULT 1 CHECK (slots >= 1),
    claimed_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (scope, holder)
);
CREATE INDEX tidegate_holders_run ON tidegate_holders (run_id);

-- Declarations from code, so every process and the CLI judge by the same rules.
CREATE TABLE tidegate_queues (
    name       TEXT PRIMARY KEY,
    config     TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE tidegate_settings (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL
);
INSERT INTO tidegate_settings (name, value, updated_at) VALUES ('rules_version', '0', 0);

-- Live limits set by operators: they win over code until reset.
CREATE TABLE tidegate_limit_overrides (
    target     TEXT PRIMARY KEY,
    "limit"    INTEGER,            -- NULL: unlimited
    version    INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
