-- Children that honour `Unique` (domain/unique.py): a trigger whose child meets its key's holder
-- stores no second run; it links its position to the holder, which it may not have created (a
-- submitted run, another parent's child). The link is what the parent's replay, its wait and its
-- resume read beside its own children (parent_id); a cancel of the parent follows parent_id only,
-- so a holder it did not create is never canceled with it. `task` and `args` are the call as the
-- parent made it: the replay check compares them, not the holder's (a key over some args only).
CREATE TABLE tidegate_child_links (
    parent_id TEXT NOT NULL,
    child_index INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    args jsonb NOT NULL,
    awaited boolean NOT NULL,
    PRIMARY KEY (parent_id, child_index)
);
-- A run's end finds the parents linked to it.
CREATE INDEX tidegate_child_links_run ON tidegate_child_links (run_id);
-- A claim asks whether a run took a key (a keyed run may be linked to by a parent later).
CREATE INDEX tidegate_unique_keys_run ON tidegate_unique_keys (run_id);

-- The holders of `keys` as a keyed submit must read them: after the keys' locks (unique.sql's
-- `unique_lock`: the same lock keys, taken in key order). VOLATILE, so its query reads a snapshot
-- taken after the locks were granted, not the calling statement's: the one-statement keyed submit
-- (`enqueue_unique_free`) takes the locks and reads every submit of its keys committed before
-- them, in one statement, with no second statement (and no pipeline) for the lock.
CREATE FUNCTION tidegate_unique_holders(keys text[]) RETURNS TABLE (key text, run_id text, status text)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM count(pg_advisory_xact_lock(hashtextextended('tidegate:' || coalesce(current_schema(), '') || '/unique:' || s.k, 0)))
    FROM (SELECT DISTINCT unnest(keys) AS k ORDER BY 1) AS s;
    RETURN QUERY
    SELECT u.key, r.id, r.status
    FROM tidegate_unique_keys AS u
    JOIN tidegate_runs AS r ON r.id = u.run_id
    WHERE u.key = ANY(keys)
      AND (position('|' || r.status || '|' in u.holds) > 0
           OR (r.status = 'completed' AND u.expires_at > tidegate_now()));
END
$$;
