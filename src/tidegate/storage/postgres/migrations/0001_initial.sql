-- Runs, their events, task defaults and named locks.
-- Times are timestamptz written from the server's now(): one clock for every
-- worker on every machine. Run ids are ULIDs compared bytewise (COLLATE "C"),
-- so ordering does not depend on the database's locale.

CREATE TABLE tidegate_runs (
    id               text COLLATE "C" PRIMARY KEY,
    task             text NOT NULL,
    queue            text NOT NULL,
    status           text NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'canceled')),
    priority         integer NOT NULL DEFAULT 0,
    args             jsonb NOT NULL,
    tags             jsonb NOT NULL DEFAULT '{}',
    concurrency_key  text,
    attempt          integer NOT NULL DEFAULT 0,  -- fencing token: +1 at every claim
    max_attempts     integer NOT NULL CHECK (max_attempts >= 1),
    retry_backoff    double precision NOT NULL,
    timeout          double precision,
    submitted_at     timestamptz NOT NULL,        -- never reset, not even by recovery
    queued_at        timestamptz NOT NULL,        -- when it last entered the queue
    scheduled_at     timestamptz NOT NULL,        -- not claimable before this
    started_at       timestamptz,
    finished_at      timestamptz,
    worker_id        text,
    lease_expires_at timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    result           jsonb,
    error            text
);

CREATE INDEX tidegate_runs_claim ON tidegate_runs (queue, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX tidegate_runs_due ON tidegate_runs (queue, scheduled_at) WHERE status = 'queued';
CREATE INDEX tidegate_runs_lease ON tidegate_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX tidegate_runs_worker ON tidegate_runs (worker_id) WHERE status = 'running';
CREATE INDEX tidegate_runs_status ON tidegate_runs (status, queue);

CREATE TABLE tidegate_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id   text COLLATE "C",  -- NULL for events about limits, not runs
    step_key text,
    type     text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    at       timestamptz NOT NULL
);
CREATE INDEX tidegate_events_run ON tidegate_events (run_id, id);

CREATE TABLE tidegate_tasks (
    name          text PRIMARY KEY,
    queue         text NOT NULL,
    priority      integer NOT NULL,
    tags          jsonb NOT NULL,
    max_attempts  integer NOT NULL,
    retry_backoff double precision NOT NULL,
    timeout       double precision,
    updated_at    timestamptz NOT NULL
);

-- A lease on a named duty (the sweeper) so that one process at a time does it.
CREATE TABLE tidegate_locks (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
