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
    args TEXT NOT NULL,
    awaited INTEGER NOT NULL,
    PRIMARY KEY (parent_id, child_index)
);
-- A run's end finds the parents linked to it.
CREATE INDEX tidegate_child_links_run ON tidegate_child_links (run_id);
-- A claim asks whether a run took a key (a keyed run may be linked to by a parent later).
CREATE INDEX tidegate_unique_keys_run ON tidegate_unique_keys (run_id);
