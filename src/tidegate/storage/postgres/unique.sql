-- PostgreSQL queries of unique.py: once per key (domain/unique.py). Conventions: database.sql.

-- name: unique_lock
-- One submitter at a time per key, locks taken in key order (two batches never wait on each other
-- in a circle). The same locks as `enqueue_unique_free` takes before it writes a key. Only the
-- statements after it read the holders: under READ COMMITTED each sees
-- every submit of the key that committed before the lock was granted, so two submitters on
-- separate connections never both take a key; the primary key of tidegate_unique_keys is the backstop.
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

-- name: enqueue_unique_free
-- `enqueue_free` for a keyed batch, as free_submit.py explains. Rows: (stored, same rules, NULL,
-- NULL, NULL), then (NULL, NULL, key, run id, status) per holder seen. Under psycopg's 4096 bytes
-- (longer statements are parsed again on every call: test_submit_round_trips.py).
WITH taken AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(key text, run_id text, holds text, period double precision)
), seen AS MATERIALIZED (
    -- a primary-key lookup per key (a LATERAL with a LIMIT is never flattened into a scan)
    SELECT u.key, u.run_id, u.holds, u.expires_at,
           (SELECT r.status FROM tidegate_runs AS r WHERE r.id = u.run_id) AS status
    FROM taken AS t
    CROSS JOIN LATERAL (SELECT * FROM tidegate_unique_keys AS k WHERE k.key = t.key LIMIT 1) AS u
), held AS MATERIALIZED (
    SELECT s.key, s.run_id AS id, s.status FROM seen AS s
    WHERE position('|' || s.status || '|' in s.holds) > 0 OR (s.status = 'completed' AND s.expires_at > tidegate_now())
), locked AS MATERIALIZED (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM held) THEN false
                ELSE (SELECT count(pg_advisory_xact_lock(hashtextextended('tidegate:' || coalesce(current_schema(), '') || '/unique:' || t.key, 0)))
                      FROM (SELECT key FROM taken ORDER BY 1) AS t) >= 0
           END AS free
), current_rules AS MATERIALIZED (
    SELECT CASE WHEN NOT (SELECT free FROM locked) THEN NULL
                ELSE coalesce((SELECT value = %(known)s::text FROM tidegate_settings WHERE name = 'rules_version'
                               FOR SHARE), false)
           END AS same
), keyed AS (
    INSERT INTO tidegate_unique_keys AS u (key, run_id, holds, expires_at)
    SELECT key, run_id, holds,
           CASE WHEN period IS NULL THEN NULL ELSE tidegate_now() + make_interval(secs => period) END
    FROM taken WHERE (SELECT same FROM current_rules)
    ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, holds = excluded.holds, expires_at = excluded.expires_at
    WHERE (u.key, u.run_id) IN (SELECT key, run_id FROM seen)
    RETURNING u.key
), go AS MATERIALIZED (
    SELECT coalesce((SELECT same FROM current_rules), false) AND (SELECT count(*) FROM keyed) = (SELECT count(*) FROM taken)
           AS stores
), new AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
        n integer, id text, task text, queue text, partition_key text, rate_key text, rate_cost integer, priority integer, args jsonb,
        tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
        timeout double precision, delay double precision, deadline double precision, trace_context text)
    WHERE (SELECT stores FROM go)
), stored AS (
    INSERT INTO tidegate_runs (
        id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt,
        max_attempts, retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at, trace_context)
    SELECT id, task, queue, partition_key, rate_key, rate_cost, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
           retry_backoff, timeout, tidegate_now(), tidegate_now(), tidegate_now() + make_interval(secs => delay),
           tidegate_now() + make_interval(secs => deadline), trace_context
    FROM new ORDER BY n
), queued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), tidegate_now()
    FROM new ORDER BY n
)
SELECT g.stores, c.same, NULL::text, NULL::text, NULL::text,
       (SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) FROM go WHERE stores)
FROM go AS g CROSS JOIN current_rules AS c
UNION ALL
SELECT NULL, NULL, h.key, h.id, h.status, NULL FROM held AS h;
