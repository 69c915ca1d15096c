-- SQLite queries of health.py: what `tidegate doctor` asks of the database itself.
-- Conventions (parameters, clock, batches): database.sql.

-- name: doctor_facts
-- The finished runs the retention sweep would delete (prune_runs' choice, without its batch
-- bound): how many, and when the oldest finished.
SELECT count(*), min(finished_at) FROM tidegate_runs
WHERE status IN ('completed', 'failed', 'canceled') AND finished_at < :cutoff
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS p WHERE p.id = tidegate_runs.parent_id
                  AND p.status NOT IN ('completed', 'failed', 'canceled'))
  AND NOT EXISTS (SELECT 1 FROM tidegate_child_links AS l JOIN tidegate_runs AS p ON p.id = l.parent_id
                  WHERE l.run_id = tidegate_runs.id AND p.status NOT IN ('completed', 'failed', 'canceled'));
