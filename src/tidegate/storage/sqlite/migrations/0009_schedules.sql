-- Schedules (issue 15): cron declarations and their cursors, one row per fired tick, and
-- the index retention deletes by.
-- `next_fire_at`: the earliest tick not yet fired or skipped (moves forward only). `paused`
-- is kept apart from the declaration, so re-declaring a schedule in code never resumes it.
CREATE TABLE tidegate_schedules (
    name         TEXT PRIMARY KEY,
    task         TEXT NOT NULL,
    cron         TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    args         TEXT NOT NULL,
    missed       TEXT NOT NULL CHECK (missed IN ('skip', 'catch_up')),
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire_at REAL NOT NULL,
    last_fire_at REAL,
    last_run_id  TEXT,
    updated_at   REAL NOT NULL
);
CREATE INDEX tidegate_schedules_due ON tidegate_schedules (next_fire_at) WHERE paused = 0;

-- One row per fired tick: the key (schedule, tick) is the proof that a tick fired once,
-- inserted in the transaction that stores its run. Old rows go with retention.
CREATE TABLE tidegate_schedule_ticks (
    schedule TEXT NOT NULL,
    tick_at  REAL NOT NULL,
    run_id   TEXT NOT NULL,
    fired_at REAL NOT NULL,
    PRIMARY KEY (schedule, tick_at)
);
CREATE INDEX tidegate_schedule_ticks_fired ON tidegate_schedule_ticks (fired_at);

-- Retention: finished runs, oldest end first.
CREATE INDEX tidegate_runs_retention ON tidegate_runs (finished_at)
    WHERE status IN ('completed', 'failed', 'canceled');
