-- SQLite queries of retention.py: deleting finished runs past the retention, in batches.
-- Conventions (parameters, clock, batches): database.sql.

-- name: prune_runs
-- The oldest finished runs that ended before :cutoff, at most :limit. Never a queued or
-- running run (the statuses are listed, so a status added later is kept, not deleted).
SELECT id FROM tidegate_runs
WHERE status IN ('completed', 'failed', 'canceled') AND finished_at < :cutoff
  -- a child whose parent is unfinished stays: the parent's replay reads it (issue 13)
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS p WHERE p.id = tidegate_runs.parent_id
                  AND p.status NOT IN ('completed', 'failed', 'canceled'))
  AND NOT EXISTS (SELECT 1 FROM tidegate_child_links AS l JOIN tidegate_runs AS p ON p.id = l.parent_id
                  WHERE l.run_id = tidegate_runs.id AND p.status NOT IN ('completed', 'failed', 'canceled'))
ORDER BY finished_at
LIMIT :limit;

-- name: prune_runs_events
DELETE FROM tidegate_events WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: prune_runs_links
-- The links of pruned parents (a run linked to by an unfinished parent is never pruned).
DELETE FROM tidegate_child_links WHERE parent_id IN (SELECT value FROM json_each(:ids));

-- name: prune_runs_steps
DELETE FROM tidegate_steps WHERE run_id IN (SELECT value FROM json_each(:ids));

-- name: prune_runs_delete
DELETE FROM tidegate_runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('completed', 'failed', 'canceled');

-- name: prune_runs_ticks
-- Fired ticks older than the retention: the schedule's cursor, not these rows, keeps a
-- tick from firing again once it is past.
DELETE FROM tidegate_schedule_ticks
WHERE rowid IN (SELECT rowid FROM tidegate_schedule_ticks WHERE fired_at < :cutoff LIMIT :limit);
