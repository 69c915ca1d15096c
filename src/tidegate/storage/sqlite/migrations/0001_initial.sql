-- Runs, their events, task defaults and named locks.
-- Times are Unix epoch seconds (REAL): SQLite's clock is the machine's clock.

CREATE TABLE tidegate_runs (
    id               TEXT PRIMARY KEY,
    task             TEXT NOT NULL,
    queue            TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'canceled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    args             TEXT NOT NULL,
    tags             TEXT NOT NULL DEFAULT '{}',
    concurrency_key  TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,  -- fencing token: +1 at every claim
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_backoff    REAL NOT NULL,
    timeout          REAL,
    submitted_at     REAL NOT NULL,               -- never reset, not even by recovery
    queued_at        REAL NOT NULL,               -- when it last entered the queue
    scheduled_at     REAL NOT NULL,               -- not claimable before this
    started_at       REAL,
    finished_at      REAL,
    worker_id        TEXT,
    lease_expires_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error            TEXT
);

CREATE INDEX tidegate_runs_claim ON tidegate_runs (queue, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX tidegate_runs_due ON tidegate_runs (queue, scheduled_at) WHERE status = 'queued';
CREATE INDEX tidegate_runs_lease ON tidegate_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX tidegate_runs_worker ON tidegate_runs (worker_id) WHERE status = 'running';
CREATE INDEX tidegate_runs_listing ON tidegate_runs (queue, status);

CREATE TABLE tidegate_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id   TEXT,                 -- NULL for events about limits, not runs
    step_key TEXT,
    type     TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    at       REAL NOT NULL
);
CREATE INDEX tidegate_events_run ON tidegate_events (run_id, id);

CREATE TABLE tidegate_tasks (
    name          TEXT PRIMARY KEY,
    queue         TEXT NOT NULL,
    priority      INTEGER NOT NULL,
    tags          TEXT NOT NULL,
    max_attempts  INTEGER NOT NULL,
    retry_backoff REAL NOT NULL,
    timeout       REAL,
    updated_at    REAL NOT NULL
);

-- A lease on a named duty (the sweeper) so that one process at a time does it.
CREATE TABLE tidegate_locks (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at REAL NOT NULL
);
