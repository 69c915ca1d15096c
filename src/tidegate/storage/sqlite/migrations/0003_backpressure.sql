-- Admission ceilings, dispatch deadlines and the worker registry (fill order, orphans).

-- Fail a run still queued past this time ("capacity: ..."); counted from submission, never reset.
ALTER TABLE tidegate_runs ADD COLUMN deadline_at REAL;
ALTER TABLE tidegate_tasks ADD COLUMN dispatch_deadline REAL;

CREATE INDEX tidegate_runs_deadline ON tidegate_runs (deadline_at)
    WHERE status = 'queued' AND deadline_at IS NOT NULL;
-- Active runs per queue, counted at submit against the admission ceiling.
CREATE INDEX tidegate_runs_active ON tidegate_runs (queue) WHERE status IN ('queued', 'running');
-- Recent completions per queue, for the Retry-After estimate.
CREATE INDEX tidegate_runs_finished ON tidegate_runs (queue, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE tidegate_workers (
    id           TEXT PRIMARY KEY,
    rank         INTEGER NOT NULL,   -- stable while the worker lives; lower ranks fill first
    capacity     INTEGER NOT NULL,
    queues       TEXT NOT NULL,      -- JSON list
    fill_order   INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    expires_at   REAL NOT NULL
);
