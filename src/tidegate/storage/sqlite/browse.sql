-- SQLite queries of browse.py: paging through runs for operators and the HTTP API.
-- Conventions (parameters, clock, batches): database.sql.

-- name: page_runs
-- Newest first by id (ULIDs sort by creation time); `before` is the last id of the previous
-- page, so a page costs an index range scan however deep it is. `tags` is a JSON object of
-- tags every run must carry (`{}` for none).
SELECT * FROM tidegate_runs
WHERE (:status IS NULL OR status = :status)
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:before IS NULL OR id < :before)
  AND NOT EXISTS (
      SELECT 1 FROM json_each(:tags) AS wanted
      WHERE NOT EXISTS (
          SELECT 1 FROM json_each(tidegate_runs.tags) AS carried
          WHERE carried.key = wanted.key AND carried.value = wanted.value))
ORDER BY id DESC
LIMIT :limit;
