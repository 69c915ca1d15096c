-- SQLite queries of schedules.py: declared schedules, their cursors and fired ticks.
-- Conventions (parameters, clock, batches): database.sql.

-- name: register_schedules
-- Upsert the code's declarations. The cursor is kept unless the expression or its zone
-- changed (then it restarts at the first tick after now); `paused` is never touched here.
INSERT INTO tidegate_schedules (name, task, cron, timezone, args, missed, next_fire_at, updated_at)
VALUES (:name, :task, :cron, :timezone, :args, :missed, :next_fire_at, :now)
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
SELECT name, task, cron, timezone, args, missed, paused, next_fire_at, last_fire_at, last_run_id
FROM tidegate_schedules WHERE paused = 0 AND next_fire_at <= :now
ORDER BY next_fire_at, name;

-- name: fire_schedule
-- Read under the single writer: a second worker with the same plan sees the cursor moved.
SELECT next_fire_at, paused FROM tidegate_schedules WHERE name = :name;

-- name: fire_schedule_ticks
-- One row per tick, unique per (schedule, tick): a conflict is the proof it fired already.
INSERT INTO tidegate_schedule_ticks (schedule, tick_at, run_id, fired_at)
SELECT :name, json_extract(value, '$.tick_at'), json_extract(value, '$.run_id'), :now
FROM json_each(:ticks) WHERE true
ON CONFLICT (schedule, tick_at) DO NOTHING
RETURNING tick_at;

-- name: fire_schedule_advance
UPDATE tidegate_schedules SET
    next_fire_at = :next_fire_at,
    last_fire_at = coalesce(:last_fire_at, last_fire_at),
    last_run_id = coalesce(:last_run_id, last_run_id)
WHERE name = :name;

-- name: set_schedule_paused
-- A resume restarts the cursor at the first tick after now: ticks of a pause are not made up.
UPDATE tidegate_schedules SET
    paused = :paused,
    next_fire_at = coalesce(:next_fire_at, next_fire_at),
    updated_at = :now
WHERE name = :name AND paused <> :paused
RETURNING name;

-- name: set_schedule_paused_exists
SELECT 1 FROM tidegate_schedules WHERE name = :name;

-- name: remove_schedule
DELETE FROM tidegate_schedules WHERE name = :name RETURNING name;
