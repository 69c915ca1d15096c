-- Once per key (domain/unique.py): one row per key, naming the run that last took it. The primary
-- key is the unique index that keeps two runs from taking one key; whether the named run still
-- holds it is read from the run at submit (its status is in `holds`, '|queued|running|', or it
-- completed and `expires_at`, its submit + period, is ahead), so a run frees its key by leaving
-- those states, with no write of its own. A row whose run was pruned holds nothing.
CREATE TABLE tidegate_unique_keys (
    key TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    holds TEXT NOT NULL,
    expires_at REAL
);
