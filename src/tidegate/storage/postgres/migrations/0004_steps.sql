-- Step-level gates: pools and step checkpoints. A step's slots are holder
-- rows in tidegate_holders (scope 'pool:NAME' or 'fanout:RUN/MAP', holder
-- 'RUN/STEPKEY'), so what a pool has in use is still the sum of its holders;
-- a claim locks the tidegate_scopes rows of its scopes in key order first.

CREATE TABLE tidegate_pools (
    name          text COLLATE "C" PRIMARY KEY,
    "limit"       integer NOT NULL CHECK ("limit" >= 0),
    lease_seconds double precision NOT NULL CHECK (lease_seconds > 0),
    updated_at    timestamptz NOT NULL
);

CREATE TABLE tidegate_steps (
    run_id      text COLLATE "C" NOT NULL,
    step_key    text COLLATE "C" NOT NULL,
    map_key     text COLLATE "C",          -- the map node a mapped item belongs to
    item_index  integer,
    status      text NOT NULL CHECK (status IN ('pending', 'running', 'completed', 'failed')),
    output      jsonb,
    error       text,
    waiting_for jsonb,                     -- {scope: slots} while it waits for slots, else NULL
    attempt     integer NOT NULL,          -- the run attempt that last wrote it
    started_at  timestamptz,
    finished_at timestamptz,
    recorded    bigint GENERATED ALWAYS AS IDENTITY,  -- first-recorded order, for listing
    PRIMARY KEY (run_id, step_key)
);
CREATE INDEX tidegate_steps_map ON tidegate_steps (run_id, map_key, item_index) WHERE map_key IS NOT NULL;
CREATE INDEX tidegate_steps_waiting ON tidegate_steps (run_id) WHERE waiting_for IS NOT NULL;

-- Step holders by holder (acquire, renew, release) and by expiry (the sweep).
CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder);
CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at);
