-- PostgreSQL queries of schedules.py: declared schedules, their cursors and fired ticks.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_schedules
-- Upsert the code's declarations. The cursor is kept unless the expression or its zone
-- changed (then it restarts at the first tick after now); `paused` is never touched here.
INSERT INTO tidegate_schedules (name, task, cron, timezone, args, missed, next_fire_at, updated_at)
SELECT name, task, cron, timezone, args, missed, next_fire_at, tidegate_now()
FROM jsonb_to_recordset(%(schedules)s::jsonb) AS s(
    name text, task text, cron text, timezone text, args jsonb, missed text, next_fire_at timestamptz)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, args = excluded.args, missed = excluded.missed,
    next_fire_at = CASE WHEN tidegate_schedules.cron = excluded.cron
                         AND tidegate_schedules.timezone = excluded.timezone
                        THEN tidegate_schedules.next_fire_at ELSE excluded.next_fire_at END,
    cron = excluded.cron, timezone = excluded.timezone, updated_at = excluded.updated_at;

-- name: list_schedules
SELECT name, task, cron, timezone, args, missed, paused, next_fire_at, last_fire_at, last_run_id
FROM tidegate_schedules ORDER BY name;

-- name: due_schedules
-- The store's time, and the schedules with a tick due by then (paused ones never are).
SELECT tidegate_now() AS now, s.name, s.task, s.cron, s.timezone, s.args, s.missed, s.paused,
       s.next_fire_at, s.last_fire_at, s.last_run_id
FROM (SELECT 1) AS one
LEFT JOIN tidegate_schedules AS s ON NOT s.paused AND s.next_fire_at <= tidegate_now()
ORDER BY s.next_fire_at, s.name;

-- name: fire_schedule
-- The schedule's row, locked until the firing commits: a second worker with the same plan
-- waits here, then sees the cursor moved and fires nothing.
SELECT next_fire_at, paused FROM tidegate_schedules WHERE name = %(name)s::text FOR UPDATE;

-- name: fire_schedule_ticks
-- One row per tick, unique per (schedule, tick): a conflict is the proof it fired already.
INSERT INTO tidegate_schedule_ticks (schedule, tick_at, run_id, fired_at)
SELECT %(name)s::text, t.tick_at, t.run_id, tidegate_now()
FROM jsonb_to_recordset(%(ticks)s::jsonb) AS t(tick_at timestamptz, run_id text)
ON CONFLICT (schedule, tick_at) DO NOTHING
RETURNING tick_at;

-- name: fire_schedule_advance
UPDATE tidegate_schedules SET
    next_fire_at = %(next_fire_at)s::timestamptz,
    last_fire_at = coalesce(%(last_fire_at)s::timestamptz, last_fire_at),
    last_run_id = coalesce(%(last_run_id)s::text, last_run_id)
WHERE name = %(name)s::text;

-- name: set_schedule_paused
-- A resume restarts the cursor at the first tick after now: ticks of a pause are not made up.
UPDATE tidegate_schedules SET
    paused = %(paused)s::boolean,
    next_fire_at = coalesce(%(next_fire_at)s::timestamptz, next_fire_at),
    updated_at = tidegate_now()
WHERE name = %(name)s::text AND paused <> %(paused)s::boolean
RETURNING name;

-- name: set_schedule_paused_exists
SELECT 1 FROM tidegate_schedules WHERE name = %(name)s::text;

-- name: remove_schedule
DELETE FROM tidegate_schedules WHERE name = %(name)s::text RETURNING name;
