-- Schedules (issue 15): cron declarations and their cursors, one row per fired tick, and
-- the index retention deletes by.
-- `next_fire_at`: the earliest tick not yet fired or skipped (moves forward only). `paused`
-- is kept apart from the declaration, so re-declaring a schedule in code never resumes it.
CREATE TABLE tidegate_schedules (
    name         text COLLATE "C" PRIMARY KEY,
    task         text NOT NULL,
    cron         text NOT NULL,
    timezone     text NOT NULL,
    args         jsonb NOT NULL,
    missed       text NOT NULL CHECK (missed IN ('skip', 'catch_up')),
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at timestamptz NOT NULL,
    last_fire_at timestamptz,
    last_run_id  text,
    updated_at   timestamptz NOT NULL
);
CREATE INDEX tidegate_schedules_due ON tidegate_schedules (next_fire_at) WHERE NOT paused;

-- One row per fired tick: the key (schedule, tick) is the proof that a tick fired once,
-- inserted in the transaction that stores its run. Old rows go with retention.
CREATE TABLE tidegate_schedule_ticks (
    schedule text COLLATE "C" NOT NULL,
    tick_at  timestamptz NOT NULL,
    run_id   text COLLATE "C" NOT NULL,
    fired_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, tick_at)
);
CREATE INDEX tidegate_schedule_ticks_fired ON tidegate_schedule_ticks (fired_at);

-- Retention: finished runs, oldest end first.
CREATE INDEX tidegate_runs_retention ON tidegate_runs (finished_at)
    WHERE status IN ('completed', 'failed', 'canceled');
