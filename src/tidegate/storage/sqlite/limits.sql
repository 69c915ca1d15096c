-- SQLite queries of limits.py: declared limits, overrides, the rules and scope usage.
-- Conventions (parameters, clock, batches): database.sql.

-- name: load_rules
-- The version of the rules; the adapter reads them whole (load_rules_run_queue,
-- load_rules_queues, load_overrides) only when it moved.
SELECT value FROM tidegate_settings WHERE name = 'rules_version';

-- name: bump_rules_version
UPDATE tidegate_settings SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT), updated_at = :now
WHERE name = 'rules_version';

-- name: load_rules_run_queue
SELECT value FROM tidegate_settings WHERE name = 'run_queue';

-- name: load_rules_queues
SELECT config, paused FROM tidegate_queues ORDER BY name;

-- name: load_rules_adaptive
SELECT target, "limit", successes, lowered_at, reason FROM tidegate_adaptive_limits ORDER BY target;

-- name: adaptive_states
-- The stored states of the adaptive targets a cycle's outcomes concern (storage/shared/adaptation.py).
SELECT target, "limit", successes, lowered_at, reason FROM tidegate_adaptive_limits
WHERE target IN (SELECT value FROM json_each(:targets));

-- name: adaptive_states_claims
-- When each ended attempt was claimed (its run holders' claimed_at), read before they are freed:
-- an overload of an attempt claimed before the last decrease is not counted again.
SELECT run_id, min(claimed_at) FROM tidegate_holders
WHERE holder = run_id AND run_id IN (SELECT value FROM json_each(:ids))
GROUP BY run_id;

-- name: adaptive_states_usage
-- The slots of the adaptive targets held now (after this cycle's ends freed theirs).
SELECT scope, sum(slots) FROM tidegate_holders
WHERE holder = run_id AND scope IN (SELECT value FROM json_each(:targets))
GROUP BY scope;

-- name: save_adaptive_states
INSERT INTO tidegate_adaptive_limits (target, "limit", successes, lowered_at, reason)
SELECT json_extract(value, '$.target'), json_extract(value, '$.limit'), json_extract(value, '$.successes'),
       json_extract(value, '$.lowered_at'), json_extract(value, '$.reason')
FROM json_each(:states) WHERE true
ON CONFLICT (target) DO UPDATE SET
    "limit" = excluded."limit", successes = excluded.successes, lowered_at = excluded.lowered_at,
    reason = excluded.reason;

-- name: load_overrides
SELECT target, "limit", version, updated_at FROM tidegate_limit_overrides ORDER BY target;

-- name: register_limits_queue
INSERT INTO tidegate_queues (name, config, updated_at) VALUES (:name, :config, :now)
ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at
WHERE tidegate_queues.config <> excluded.config
RETURNING name;

-- name: register_limits_implied
-- A queue a task uses without declaring it: known, with no limits, unless declared elsewhere.
INSERT INTO tidegate_queues (name, config, updated_at) VALUES (:name, :config, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: register_limits
-- The run-queue config; the queues follow (register_limits_queue,
-- register_limits_implied). Each returns a row when it changed something.
INSERT INTO tidegate_settings (name, value, updated_at) VALUES ('run_queue', :value, :now)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
WHERE tidegate_settings.value <> excluded.value
RETURNING name;

-- name: scope_usage
-- Run-level scopes only: a run's own holders (holder = its id); steps' pool
-- and window slots are shown by `pools`.
SELECT scope, sum(slots) FROM tidegate_holders WHERE holder = run_id GROUP BY scope;

-- name: scope_holders
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders
WHERE scope = :scope ORDER BY claimed_at, holder;

-- name: set_override
INSERT INTO tidegate_limit_overrides (target, "limit", version, updated_at) VALUES (:target, :limit, 1, :now)
ON CONFLICT (target) DO UPDATE SET
    "limit" = excluded."limit", version = tidegate_limit_overrides.version + 1, updated_at = excluded.updated_at
RETURNING version;

-- name: reset_override
DELETE FROM tidegate_limit_overrides WHERE target = :target RETURNING "limit", version;

-- name: live_rate_states
-- Also the hint of the claim's candidate read (claiming.candidate_rows: it steps over the runs of a
-- rate partition its state holds back).
-- The rate states that may still hold a start back: a window whose TAT is not after now allows
-- any cost up to its burst (domain/rates.py), so older rows are left unread (:after has slack).
SELECT scope, window_ns, tat_ns FROM tidegate_rate_states WHERE tat_ns > :after;
