-- A keyed submit (domain/unique.py) wrote three b-trees for its key: the key table (a rowid table),
-- its primary key's index, and the index on run_id that only a claim read (did this run take a
-- key? a keyed run may be a linked child, whose end resumes a parent). Now the key table is its
-- primary key alone (WITHOUT ROWID: one b-tree), and the claim reads the run's own `keyed` flag,
-- written with the run by the submit that took the key: one b-tree written per key, not three
-- (WAL pages per single keyed submit 13 -> 11; a plain submit writes 10).
CREATE TABLE tidegate_unique_keys_by_key (
    key TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    holds TEXT NOT NULL,
    expires_at REAL
) WITHOUT ROWID;
INSERT INTO tidegate_unique_keys_by_key (key, run_id, holds, expires_at)
SELECT key, run_id, holds, expires_at FROM tidegate_unique_keys;
DROP TABLE tidegate_unique_keys;
ALTER TABLE tidegate_unique_keys_by_key RENAME TO tidegate_unique_keys;
-- 1: the run took a key when it was stored (it may have lost it since: a claim then only looks for
-- parents it has none of, as it did for a run whose key row named it).
ALTER TABLE tidegate_runs ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;
UPDATE tidegate_runs SET keyed = 1 WHERE id IN (SELECT run_id FROM tidegate_unique_keys);
