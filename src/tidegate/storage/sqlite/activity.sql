-- SQLite queries of activity.py: what the fleet is doing, for operators (workers, recent ends).
-- Conventions (parameters, clock, batches): database.sql.

-- name: list_workers
-- Every registered worker, live ones first by rank; a dead one stays until the sweep forgets it.
SELECT w.id, w.rank, w.capacity, w.queues, w.fill_order, w.started_at, w.heartbeat_at,
       (SELECT count(*) FROM tidegate_runs AS r WHERE r.worker_id = w.id AND r.status = 'running') AS busy,
       :now - w.heartbeat_at AS heartbeat_age,
       w.expires_at >= :now AS live,
       w.expires_at - w.heartbeat_at AS lease_seconds
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

-- name: run_pace
-- How long the runs matching the filters (as finished_count's) take: those started and ended within the
-- window (count, total seconds), those running now (count, seconds so far) and the mean duration of the
-- last :history that ended before the window. Times are epoch seconds, so a duration is a difference.
WITH matching AS NOT MATERIALIZED (  -- inlined in each use, so each reads through its own index
    SELECT started_at, finished_at, status FROM tidegate_runs
    WHERE started_at IS NOT NULL
      AND (:queue IS NULL OR queue = :queue)
      AND (:partition IS NULL OR partition_key = :partition)
      AND NOT EXISTS (
          SELECT 1 FROM json_each(:tags) AS wanted
          WHERE NOT EXISTS (
              SELECT 1 FROM json_each(tidegate_runs.tags) AS carried
              WHERE carried.key = wanted.key AND carried.value = wanted.value))
)
SELECT
    (SELECT count(*) FROM matching WHERE finished_at >= :now - :within),
    (SELECT coalesce(sum(finished_at - started_at), 0.0) FROM matching WHERE finished_at >= :now - :within),
    (SELECT count(*) FROM matching WHERE status = 'running'),
    (SELECT coalesce(sum(max(0.0, :now - started_at)), 0.0) FROM matching WHERE status = 'running'),
    (SELECT avg(finished_at - started_at) FROM (
        SELECT started_at, finished_at FROM matching WHERE finished_at < :now - :within
        ORDER BY finished_at DESC LIMIT :history));
