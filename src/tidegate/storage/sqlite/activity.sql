-- SQLite queries of activity.py: what the fleet is doing, for operators (workers, recent ends).
-- Conventions (parameters, clock, batches): database.sql.

-- name: list_workers
-- Every registered worker, live ones first by rank; a dead one stays until the sweep forgets it.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order, w.started_at, w.heartbeat_at,
       (SELECT count(*) FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS busy,
       :now - w.heartbeat_at AS heartbeat_age,
       w.expires_at >= :now AS live
FROM tidegate_workers AS w
ORDER BY live DESC, w.rank, w.id;

-- name: finished_count
-- Runs that were claimed (attempt > 0: a run canceled before any claim held no slot) and ended within
-- the window, matching each filter; `tags` is a JSON object every run must carry (`{}` for none).
SELECT count(*) FROM tidegate_runs
WHERE finished_at >= :now - :within AND attempt > 0
  AND status IN ('completed', 'failed', 'canceled')
  AND (:queue IS NULL OR queue = :queue)
  AND (:partition IS NULL OR partition_key = :partition)
  AND NOT EXISTS (
      SELECT 1 FROM json_each(:tags) AS wanted
      WHERE NOT EXISTS (
          SELECT 1 FROM json_each(tidegate_runs.tags) AS carried
          WHERE carried.key = wanted.key AND carried.value = wanted.value));
