-- PostgreSQL queries of activity.py: what the fleet is doing, for operators (workers, recent ends).

-- name: list_workers
-- Every registered worker, live ones first by rank; a dead one stays until the sweep forgets it.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order, w.started_at, w.heartbeat_at,
       (SELECT count(*)::integer FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS busy,
       extract(epoch FROM tidegate_now() - w.heartbeat_at)::double precision AS heartbeat_age,
       w.expires_at >= tidegate_now() AS live,
       extract(epoch FROM w.expires_at - w.heartbeat_at)::double precision AS lease_seconds
FROM tidegate_workers AS w
ORDER BY live DESC, w.rank, w.id;

-- name: finished_count
-- Runs that were claimed (attempt > 0: a run canceled before any claim held no slot) and ended within
-- the window, matching each filter; `tags` is a JSON object every run must carry (`{}` for none).
SELECT count(*)::integer FROM tidegate_runs
WHERE finished_at >= tidegate_now() - make_interval(secs => %(within)s::double precision)
  AND attempt > 0
  AND status IN ('completed', 'failed', 'canceled')
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(partition)s::text IS NULL OR partition_key = %(partition)s::text)
  AND tags @> %(tags)s::jsonb;

-- name: run_pace
-- How long the runs matching the filters (as finished_count's) take: those started and ended within the
-- window (count, total seconds), those running now (count, seconds so far) and the mean duration of the
-- last %(history)s that ended before the window.
WITH matching AS NOT MATERIALIZED (  -- inlined in each use, so each reads through its own index
    SELECT started_at, finished_at, status FROM tidegate_runs
    WHERE started_at IS NOT NULL
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(partition)s::text IS NULL OR partition_key = %(partition)s::text)
      AND tags @> %(tags)s::jsonb
), since AS (
    SELECT tidegate_now() AS now, tidegate_now() - make_interval(secs => %(within)s::double precision) AS start
)
SELECT
    (SELECT count(*)::integer FROM matching, since WHERE finished_at >= since.start),
    (SELECT coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::double precision
     FROM matching, since WHERE finished_at >= since.start),
    (SELECT count(*)::integer FROM matching WHERE status = 'running'),
    (SELECT coalesce(sum(greatest(0, extract(epoch FROM since.now - started_at))), 0)::double precision
     FROM matching, since WHERE status = 'running'),
    (SELECT avg(extract(epoch FROM finished_at - started_at))::double precision FROM (
        SELECT started_at, finished_at FROM matching, since WHERE finished_at < since.start
        ORDER BY finished_at DESC LIMIT %(history)s) AS earlier);
