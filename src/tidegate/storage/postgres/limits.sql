-- PostgreSQL queries of limits.py: declared limits, overrides, the rules and scope usage.
-- Conventions (parameters, clock, batches): database.sql.

-- name: rules_fence
SELECT pg_advisory_xact_lock(hashtext('tidegate:rules'), hashtext(coalesce(current_schema(), '')));

-- name: load_rules
-- The declared limits, live overrides and paused queues in one snapshot, with their
-- version; only the version when it equals `known` (what the adapter has cached).
SELECT v.value,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT value FROM tidegate_settings WHERE name = 'run_queue') END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(config ORDER BY name), '[]'::jsonb) FROM tidegate_queues) END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(jsonb_build_array(target, "limit") ORDER BY target), '[]'::jsonb)
                  FROM tidegate_limit_overrides) END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(name ORDER BY name), '[]'::jsonb) FROM tidegate_queues WHERE paused) END,
       CASE WHEN v.value = %(known)s::text THEN NULL
            ELSE (SELECT coalesce(jsonb_agg(jsonb_build_array(target, "limit", successes, lowered_at, reason)
                                            ORDER BY target), '[]'::jsonb)
                  FROM tidegate_adaptive_limits) END
FROM tidegate_settings AS v WHERE v.name = 'rules_version';

-- name: register_limits
-- Code declarations, in one statement: the run-queue config (unless NULL), the
-- declared queues (replaced when they differ) and the queues tasks use without
-- declaring them (known with no limits, unless declared elsewhere). When any
-- of these changed, the rules version moves and workers are woken (a raised
-- limit may unblock runs).
WITH run_queue AS (
    INSERT INTO tidegate_settings (name, value, updated_at)
    SELECT 'run_queue', %(run_queue)s::text, tidegate_now() WHERE %(run_queue)s::text IS NOT NULL
    ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
    WHERE tidegate_settings.value <> excluded.value
    RETURNING name
), declared AS (
    INSERT INTO tidegate_queues (name, config, updated_at)
    SELECT q.name, q.config, tidegate_now() FROM jsonb_to_recordset(%(queues)s::jsonb) AS q(name text, config jsonb)
    ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at
    WHERE tidegate_queues.config <> excluded.config
    RETURNING name
), implied AS (
    INSERT INTO tidegate_queues (name, config, updated_at)
    SELECT q.name, q.config, tidegate_now() FROM jsonb_to_recordset(%(implied)s::jsonb) AS q(name text, config jsonb)
    ON CONFLICT (name) DO NOTHING
    RETURNING name
), bumped AS (
    UPDATE tidegate_settings SET value = (value::bigint + 1)::text, updated_at = tidegate_now()
    WHERE name = 'rules_version'
      AND EXISTS (SELECT 1 FROM run_queue UNION ALL SELECT 1 FROM declared UNION ALL SELECT 1 FROM implied)
    RETURNING value
)
SELECT pg_notify('tidegate_' || md5(current_schema()), '') FROM bumped;

-- name: bump_rules_version
UPDATE tidegate_settings SET value = (value::bigint + 1)::text, updated_at = tidegate_now()
WHERE name = 'rules_version';

-- name: adaptive_states_seed
-- A target's first signal: its row, at the top of its range, so that the next statement can lock it
-- (a concurrent first insert waits for the other's commit, then finds the row).
INSERT INTO tidegate_adaptive_limits (target, "limit")
SELECT s.target, s."limit" FROM jsonb_to_recordset(%(seeds)s::jsonb) AS s(target text, "limit" integer)
ORDER BY s.target
ON CONFLICT (target) DO NOTHING;

-- name: adaptive_states
-- The stored states of the adaptive targets a cycle's outcomes concern, locked in target order
-- until the cycle commits (storage/shared/adaptation.py), with the database's time.
WITH locked AS (
    SELECT target, "limit", successes, lowered_at, reason FROM tidegate_adaptive_limits
    WHERE target = ANY(%(targets)s::text[]) ORDER BY target FOR UPDATE
)
SELECT extract(epoch FROM tidegate_now())::double precision, l.target, l."limit", l.successes, l.lowered_at, l.reason
FROM (SELECT 1) AS one LEFT JOIN locked AS l ON true;

-- name: adaptive_states_usage
-- The slots of the adaptive targets held now (after this cycle's ends freed theirs).
SELECT scope, sum(slots)::integer FROM tidegate_slot_holders
WHERE holder = run_id AND scope = ANY(%(targets)s::text[])
GROUP BY scope;

-- name: save_adaptive_states
UPDATE tidegate_adaptive_limits AS a SET
    "limit" = s."limit", successes = s.successes, lowered_at = s.lowered_at, reason = s.reason
FROM jsonb_to_recordset(%(states)s::jsonb) AS s(target text, "limit" integer, successes integer,
                                                 lowered_at double precision, reason text)
WHERE a.target = s.target;

-- name: load_overrides
SELECT target, "limit", version, updated_at FROM tidegate_limit_overrides ORDER BY target;

-- name: set_override
INSERT INTO tidegate_limit_overrides (target, "limit", version, updated_at)
VALUES (%(target)s::text, %(limit)s::integer, 1, tidegate_now())
ON CONFLICT (target) DO UPDATE SET
    "limit" = excluded."limit", version = tidegate_limit_overrides.version + 1, updated_at = excluded.updated_at
RETURNING version;

-- name: reset_override
DELETE FROM tidegate_limit_overrides WHERE target = %(target)s::text RETURNING "limit", version;

-- name: scope_usage
-- Run-level scopes only: a run's own holders (holder = its id); steps' pool
-- and window slots are shown by `pools`.
SELECT scope, sum(slots)::integer FROM tidegate_slot_holders WHERE holder = run_id GROUP BY scope ORDER BY scope;

-- name: scope_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_slot_holders
WHERE scope = %(scope)s::text ORDER BY claimed_at, holder;

-- name: live_rate_states
-- Also the hint of the claim's candidate read (claiming.candidate_rows: it steps over the runs of a
-- rate partition its state holds back).
-- The rate states that may still hold a start back, with the database's time of the read: a
-- window whose TAT is not after now allows any cost up to its burst (domain/rates.py), so older
-- rows are left unread (with slack for the float's rounding).
WITH clock AS (SELECT extract(epoch FROM tidegate_statement_timestamp())::double precision AS now)
SELECT c.now, s.scope, s.window_ns, s.tat_ns
FROM clock AS c LEFT JOIN tidegate_rate_states AS s
  ON s.tat_ns > (c.now * 1000000000)::bigint - %(slack)s::bigint;
