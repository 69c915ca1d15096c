-- PostgreSQL queries of health.py: what `tidegate doctor` asks of the server itself.
-- Conventions (parameters, clock, batches): database.sql.

-- name: doctor_facts
-- The store's time and the server's own (without a test clock's offset); its connection
-- limits and the connections open now; and the finished runs the retention sweep would
-- delete (prune_runs' choice, without its batch bound): how many, the oldest's end.
SELECT tidegate_now(), statement_timestamp(),
       current_setting('max_connections')::integer,
       current_setting('superuser_reserved_connections')::integer,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::integer,
       count(*)::integer, min(finished_at)
FROM tidegate_runs
WHERE status IN ('completed', 'failed', 'canceled')
  AND finished_at < tidegate_now() - make_interval(secs => %(retention)s::double precision)
  AND NOT EXISTS (SELECT 1 FROM tidegate_runs AS p WHERE p.id = tidegate_runs.parent_id
                  AND p.status NOT IN ('completed', 'failed', 'canceled'))
  AND NOT EXISTS (SELECT 1 FROM tidegate_child_links AS l JOIN tidegate_runs AS p ON p.id = l.parent_id
                  WHERE l.run_id = tidegate_runs.id AND p.status NOT IN ('completed', 'failed', 'canceled'));
