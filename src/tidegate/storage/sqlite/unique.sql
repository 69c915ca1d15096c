-- SQLite queries of unique.py: once per key (domain/unique.py). The submit's BEGIN IMMEDIATE
-- transaction is what keeps two submitters from both taking a key (SQLite's single writer).

-- name: unique_holders
-- The keys still held, each with the run holding it: its status is one of the key's `holds`, or it
-- completed and the key's period has not run out (failed and canceled runs never hold one).
SELECT k.key, r.id, r.status
FROM tidegate_unique_keys AS k
JOIN tidegate_runs AS r ON r.id = k.run_id
WHERE k.key IN (SELECT value FROM json_each(:keys))
  AND (instr(k.holds, '|' || r.status || '|') > 0 OR (r.status = 'completed' AND k.expires_at > :now));

-- name: unique_take_new
-- A single keyed submit takes a key nobody ever took in the insert itself: the primary key refuses
-- a second row, and a key that has one (held or freed) changes no row (the cursor's rowcount is 0),
-- so the submit reads its holder the general way (unique_holders). Under the write lock: nobody
-- takes the key in between. No RETURNING: SQLite runs it through a table of its own, about as
-- many instructions as the insert itself.
INSERT INTO tidegate_unique_keys (key, run_id, holds, expires_at)
VALUES (:key, :run_id, :holds, CASE WHEN :period IS NULL THEN NULL ELSE :now + :period END)
ON CONFLICT (key) DO NOTHING;

-- name: unique_take
INSERT INTO tidegate_unique_keys (key, run_id, holds, expires_at)
VALUES (:key, :run_id, :holds, CASE WHEN :period IS NULL THEN NULL ELSE :now + :period END)
ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, holds = excluded.holds, expires_at = excluded.expires_at;

-- name: unique_replace
-- A still-queued holder takes a later submit's args (on_conflict "replace", debounce). With a
-- debounce it is due `delay` from now, but no later than `max_wait` after its own submit.
UPDATE tidegate_runs SET
    args = :args,
    partition_key = :partition,
    rate_key = :rate_key,
    rate_cost = :rate_cost,
    scheduled_at = CASE
        WHEN NOT :debounce THEN scheduled_at
        WHEN :max_wait IS NULL THEN :now + :delay
        ELSE min(:now + :delay, submitted_at + :max_wait)
    END
WHERE id = :id AND status = 'queued'
RETURNING id;
