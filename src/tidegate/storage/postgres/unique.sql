-- PostgreSQL queries of unique.py: once per key (domain/unique.py). Conventions: database.sql.

-- name: unique_lock
-- One submitter at a time per key, locks taken in key order (two batches never wait on each other
-- in a circle). Only the statements after it read the holders: under READ COMMITTED each sees
-- every submit of the key that committed before the lock was granted, so two submitters on
-- separate connections never both take a key; the primary key of tidegate_unique_keys is the last guard.
SELECT count(pg_advisory_xact_lock(hashtextextended('tidegate:' || coalesce(current_schema(), '') || '/unique:' || k, 0)))
FROM (SELECT DISTINCT unnest(%(keys)s::text[]) AS k ORDER BY 1) AS s;

-- name: unique_holders
-- The keys still held, each with the run holding it: its status is one of the key's `holds`, or it
-- completed and the key's period has not run out (failed and canceled runs never hold one).
SELECT k.key, r.id, r.status
FROM tidegate_unique_keys AS k
JOIN tidegate_runs AS r ON r.id = k.run_id
WHERE k.key = ANY(%(keys)s::text[])
  AND (position('|' || r.status || '|' in k.holds) > 0
       OR (r.status = 'completed' AND k.expires_at > tidegate_now()));

-- name: unique_take
-- The keys the stored runs took, each naming its run, with its holding rule.
INSERT INTO tidegate_unique_keys (key, run_id, holds, expires_at)
SELECT key, run_id, holds,
       CASE WHEN period IS NULL THEN NULL ELSE tidegate_now() + make_interval(secs => period) END
FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(key text, run_id text, holds text, period double precision)
ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, holds = excluded.holds, expires_at = excluded.expires_at;

-- name: unique_replace
-- A still-queued holder takes a later submit's args (on_conflict "replace", debounce). With a
-- debounce it is due `delay` from now, but no later than `max_wait` after its own submit.
UPDATE tidegate_runs SET
    args = %(args)s::jsonb,
    partition_key = %(partition)s::text,
    rate_key = %(rate_key)s::text,
    rate_cost = %(rate_cost)s::integer,
    scheduled_at = CASE
        WHEN NOT %(debounce)s::boolean THEN scheduled_at
        WHEN %(max_wait)s::double precision IS NULL THEN tidegate_now() + make_interval(secs => %(delay)s::double precision)
        ELSE least(tidegate_now() + make_interval(secs => %(delay)s::double precision),
                   submitted_at + make_interval(secs => %(max_wait)s::double precision))
    END
WHERE id = %(id)s::text AND status = 'queued'
RETURNING id;
