-- PostgreSQL queries of activity.py: what the fleet is doing, for operators (workers, recent ends).

-- name: list_workers
-- Every registered worker, live ones first by rank; a dead one stays until the sweep forgets it.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order, w.started_at, w.heartbeat_at,
       (SELECT count(*)::integer FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS busy,
       extract(epoch FROM tidegate_now() - w.heartbeat_at)::double precision AS heartbeat_age,
       w.expires_at >= tidegate_now() AS live
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
