-- SQLite queries of look.py: a woken worker's look before it claims.

-- name: peek_cycle
-- The slots in use of each scope in `keys` (run holders only, as scope_usage counts them).
SELECT k.value, coalesce((SELECT sum(h.slots) FROM tidegate_holders AS h
                          WHERE h.scope = k.value AND h.holder = h.run_id), 0)
FROM json_each(:keys) AS k;

-- name: peek_cycle_keyed
-- Which of `queues` hold a queued run with a concurrency key (keyed runs sort after '' in the partition index).
SELECT q.value FROM json_each(:queues) AS q
WHERE EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.status = 'queued' AND r.queue = q.value AND r.partition_key > '');

-- name: peek_cycle_empty
-- Which of `queues` hold no queued run at all.
SELECT q.value FROM json_each(:queues) AS q
WHERE NOT EXISTS (SELECT 1 FROM tidegate_runs AS r WHERE r.status = 'queued' AND r.queue = q.value);
