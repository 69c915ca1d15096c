-- PostgreSQL queries of unique.py: once per key (domain/unique.py). Conventions: database.sql.

-- name: unique_lock
-- One submitter at a time per key, locks taken in key order (two batches never wait on each other
-- in a circle). The same locks as `tidegate_unique_holders` (migration 0025) takes. Only the statements after it read the holders: under READ COMMITTED each sees
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
-- `enqueue_free` for a keyed batch whose keys are distinct and none of whose runs replaces a
-- holder (free_submit.py), one statement: `tidegate_unique_holders` (migration 0025) takes the
-- keys' locks (`unique_lock`'s) and then reads their holders (unique_holders' rule) in a snapshot
-- of its own, taken after the locks were granted, so it sees every submit of these keys that
-- committed before (this statement's own snapshot, taken before the locks, may not). It stores the runs, their
-- RunQueued events, their keys and the wake-up only if no key is held and the rules version is
-- still `known` (read FOR SHARE, as enqueue_free does: no ceiling set since is submitted past).
-- The version is read only when no key is held (CASE: its subquery runs only when asked for), so
-- a batch of duplicates locks no row and writes nothing: it commits with no WAL flush.
-- Its rows: one head row (stored, same rules, NULL, NULL, NULL), then one per holder (NULL,
-- NULL, key, run id, status), from which the adapter answers duplicates.
WITH taken AS MATERIALIZED (
    SELECT * FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(key text, run_id text, holds text, period double precision)
), held AS MATERIALIZED (
    SELECT h.key, h.run_id AS id, h.status FROM tidegate_unique_holders(ARRAY(SELECT key FROM taken)) AS h
), current_rules AS MATERIALIZED (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM held) THEN NULL
                ELSE coalesce((SELECT value = %(known)s::text FROM tidegate_settings WHERE name = 'rules_version'
                               FOR SHARE), false)
           END AS same
), go AS MATERIALIZED (
    SELECT coalesce((SELECT same FROM current_rules), false) AS stores
), new AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(
        n integer, id text, task text, queue text, partition_key text, rate_key text, priority integer, args jsonb,
        tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
        timeout double precision, delay double precision, deadline double precision, trace_context text)
    WHERE (SELECT stores FROM go)
), stored AS (
    INSERT INTO tidegate_runs (
        id, task, queue, partition_key, rate_key, status, priority, args, tags, concurrency_key, attempt,
        max_attempts, retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at, trace_context)
    SELECT id, task, queue, partition_key, rate_key, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
           retry_backoff, timeout, tidegate_now(), tidegate_now(), tidegate_now() + make_interval(secs => delay),
           tidegate_now() + make_interval(secs => deadline), trace_context
    FROM new ORDER BY n
), queued AS (
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), tidegate_now()
    FROM new ORDER BY n
), keyed AS (
    INSERT INTO tidegate_unique_keys (key, run_id, holds, expires_at)
    SELECT key, run_id, holds,
           CASE WHEN period IS NULL THEN NULL ELSE tidegate_now() + make_interval(secs => period) END
    FROM taken WHERE (SELECT stores FROM go)
    ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, holds = excluded.holds, expires_at = excluded.expires_at
)
SELECT g.stores, c.same, NULL::text, NULL::text, NULL::text,
       (SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) FROM go WHERE stores)
FROM go AS g CROSS JOIN current_rules AS c
UNION ALL
SELECT NULL, NULL, h.key, h.id, h.status, NULL FROM held AS h;
