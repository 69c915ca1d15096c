-- PostgreSQL queries of retention.py: deleting finished runs past the retention, in batches.
-- Conventions (parameters, clock, batches): database.sql.

-- name: prune_runs
-- The oldest finished runs that ended more than :older_than seconds ago, at most :limit,
-- locked (SKIP LOCKED: a run an operator is retrying right now is left for the next batch)
-- and deleted with their events, step checkpoints and the oldest fired ticks. Never a
-- queued or running run: the statuses are listed, and checked again on the locked row.
WITH doomed AS (
    SELECT id FROM tidegate_runs
    WHERE status IN ('completed', 'failed', 'canceled')
      AND finished_at < tidegate_now() - make_interval(secs => %(older_than)s::double precision)
      -- a child whose parent is unfinished stays: the parent's replay reads it (issue 13)
      AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS p WHERE p.id = tidegate_runs.parent_id
                      AND p.status NOT IN ('completed', 'failed', 'canceled'))
      -- and a run some unfinished parent linked to (a unique child's holder, child_links.py)
      AND NOT EXISTS (SELECT 1 FROM tidegate_child_links AS l JOIN tidegate_runs AS p ON p.id = l.parent_id
                      WHERE l.run_id = tidegate_runs.id AND p.status NOT IN ('completed', 'failed', 'canceled'))
    ORDER BY finished_at
    LIMIT %(limit)s::integer
    FOR UPDATE SKIP LOCKED
), runs AS (
    DELETE FROM tidegate_runs AS r USING doomed AS d
    WHERE r.id = d.id AND r.status IN ('completed', 'failed', 'canceled')
    RETURNING r.id
), events AS (
    DELETE FROM tidegate_events AS e USING runs WHERE e.run_id = runs.id RETURNING 1
), links AS (
    DELETE FROM tidegate_child_links AS l USING runs WHERE l.parent_id = runs.id
), steps AS (
    DELETE FROM tidegate_steps AS s USING runs WHERE s.run_id = runs.id RETURNING 1
), ticks AS (
    -- The schedule's cursor, not these rows, keeps a tick from firing again once it is past.
    DELETE FROM tidegate_schedule_ticks AS t
    WHERE (t.schedule, t.tick_at) IN (
        SELECT schedule, tick_at FROM tidegate_schedule_ticks
        WHERE fired_at < tidegate_now() - make_interval(secs => %(older_than)s::double precision)
        LIMIT %(limit)s::integer)
    RETURNING 1
)
SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM events), (SELECT count(*) FROM steps),
       (SELECT count(*) FROM ticks);
