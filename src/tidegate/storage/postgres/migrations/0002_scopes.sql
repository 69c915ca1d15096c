-- Run-level scopes: every limit is a key whose slots in use are the sum of
-- its holder rows. There is no counter anywhere to drift from them.
-- Keys and partitions compare bytewise (COLLATE "C"): the lock order of
-- scopes is then the order Python's sorted() gives, and partitions are
-- listed in the same order as on SQLite.

ALTER TABLE tidegate_runs ADD COLUMN partition_key text COLLATE "C" NOT NULL DEFAULT '';
-- JSON list of the saturated scopes that last kept this queued run waiting.
ALTER TABLE tidegate_runs ADD COLUMN block_reason jsonb;

CREATE INDEX tidegate_runs_partition ON tidegate_runs (queue, partition_key, priority DESC, scheduled_at, id)
    WHERE status = 'queued';

CREATE TABLE tidegate_holders (
    scope      text COLLATE "C" NOT NULL,
    holder     text COLLATE "C" NOT NULL,  -- the run id (a step adds its key later)
    run_id     text COLLATE "C" NOT NULL,
    attempt    integer NOT NULL,
    worker_id  text,
    slots      integer NOT NULL DEFAULT 1 CHECK (slots >= 1),
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, holder)
);
CREATE INDEX tidegate_holders_run ON tidegate_holders (run_id);

-- One lock row per scope key, only on PostgreSQL (SQLite has a single writer).
-- A claim locks the rows of every scope its candidates need, in key order,
-- before it sums their holders: SKIP LOCKED on run rows alone would let two
-- claimers both see the last free slot. Rows are created on first use and
-- never deleted; they hold nothing but the key.
CREATE TABLE tidegate_scopes (
    key text COLLATE "C" PRIMARY KEY
);

-- Declarations from code, so every process and the CLI judge by the same rules.
CREATE TABLE tidegate_queues (
    name       text PRIMARY KEY,
    config     jsonb NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE TABLE tidegate_settings (
    name       text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL
);
INSERT INTO tidegate_settings (name, value, updated_at) VALUES ('rules_version', '0', now());

-- Live limits set by operators: they win over code until reset.
CREATE TABLE tidegate_limit_overrides (
    target     text PRIMARY KEY,
    "limit"    integer,                    -- NULL: unlimited
    version    integer NOT NULL,
    updated_at timestamptz NOT NULL
);
