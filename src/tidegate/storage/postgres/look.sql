-- PostgreSQL queries of look.py: a woken worker's look before it claims.
-- Conventions (parameters, clock, batches): database.sql.

-- name: peek_cycle
-- One statement, no lock: the rules version (is the cached rules' the one in
-- force?), the slots in use of each scope in `keys` (run holders only, as
-- scope_usage counts them: one pass over the running and waiting runs), which of
-- `queues` hold a queued run with a concurrency key (a seek of the partition
-- index each: keyed runs sort after '' there), which of the `open` queues hold no
-- queued run at all (a seek of the claim index each), and this worker's cancel requests.
SELECT v.value,
       ARRAY(SELECT coalesce(u.used, 0)::integer
             FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS k(key, n)
             LEFT JOIN (SELECT h.scope, sum(h.slots) AS used FROM tidegate_slot_holders AS h
                        WHERE h.holder = h.run_id AND h.scope = ANY(%(keys)s::text[]) GROUP BY h.scope) AS u
                    ON u.scope = k.key
             ORDER BY k.n),
       ARRAY(SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
             WHERE EXISTS (SELECT 1 FROM tidegate_runs AS r
                           WHERE r.status = 'queued' AND r.queue = q.name AND r.partition_key > '')),
       ARRAY(SELECT q.name FROM unnest(%(open)s::text[]) AS q(name)
             WHERE NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.status = 'queued' AND r.queue = q.name)),
       ARRAY(SELECT jsonb_build_array(c.id, c.attempt) FROM tidegate_runs AS c
             WHERE c.worker_id = %(worker)s::text AND c.status = 'running' AND c.cancel_requested)
FROM tidegate_settings AS v WHERE v.name = 'rules_version';
