-- Child runs and durable waits (issue 13): see the PostgreSQL migration of the same number for
-- what each column means. SQLite cannot change a CHECK constraint in place, so the runs table is
-- rebuilt (the documented twelve-step way: new table, copy, drop, rename, indexes again), with
-- the new status `waiting` allowed and the new columns added.
CREATE TABLE tidegate_runs_0008 (
    id               TEXT PRIMARY KEY,
    task             TEXT NOT NULL,
    queue            TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'canceled')),
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
    error            TEXT,
    partition_key    TEXT NOT NULL DEFAULT '',
    block_reason     TEXT,
    deadline_at      REAL,
    suspect          INTEGER NOT NULL DEFAULT 0,
    rescued_from     TEXT,
    parent_id        TEXT,
    root_id          TEXT,
    depth            INTEGER NOT NULL DEFAULT 0,
    child_index      INTEGER,
    awaited          INTEGER NOT NULL DEFAULT 0,
    on_parent_cancel TEXT NOT NULL DEFAULT 'cancel' CHECK (on_parent_cancel IN ('cancel', 'abandon')),
    wait_kept        TEXT,
    wait_released    TEXT,
    waiting_since    REAL
);

INSERT INTO tidegate_runs_0008 (
    id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts, retry_backoff,
    timeout, submitted_at, queued_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
    cancel_requested, result, error, partition_key, block_reason, deadline_at, suspect, rescued_from)
SELECT
    id, task, queue, status, priority, args, tags, concurrency_key, attempt, max_attempts, retry_backoff,
    timeout, submitted_at, queued_at, scheduled_at, started_at, finished_at, worker_id, lease_expires_at,
    cancel_requested, result, error, partition_key, block_reason, deadline_at, suspect, rescued_from
FROM tidegate_runs;

DROP TABLE tidegate_runs;
ALTER TABLE tidegate_runs_0008 RENAME TO tidegate_runs;

CREATE INDEX tidegate_runs_claim ON tidegate_runs (queue, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX tidegate_runs_due ON tidegate_runs (queue, scheduled_at) WHERE status = 'queued';
CREATE INDEX tidegate_runs_lease ON tidegate_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX tidegate_runs_worker ON tidegate_runs (worker_id) WHERE status = 'running';
CREATE INDEX tidegate_runs_listing ON tidegate_runs (queue, status);
CREATE INDEX tidegate_runs_partition ON tidegate_runs (queue, partition_key, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX tidegate_runs_deadline ON tidegate_runs (deadline_at)
    WHERE status = 'queued' AND deadline_at IS NOT NULL;
-- A waiting run is active: it counts against the admission ceilings (max_active).
CREATE INDEX tidegate_runs_active ON tidegate_runs (queue) WHERE status IN ('queued', 'running', 'waiting');
CREATE INDEX tidegate_runs_finished ON tidegate_runs (queue, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tidegate_runs_rescued_from ON tidegate_runs (rescued_from) WHERE rescued_from IS NOT NULL;
CREATE UNIQUE INDEX tidegate_runs_children ON tidegate_runs (parent_id, child_index) WHERE parent_id IS NOT NULL;
CREATE INDEX tidegate_runs_waiting ON tidegate_runs (id) WHERE status = 'waiting';
