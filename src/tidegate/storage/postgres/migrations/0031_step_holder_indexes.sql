-- The holder and expiry indexes serve step holders only (holder = 'RUN/STEPKEY'): steps acquire,
-- renew, hand on and release by holder, and the step sweep looks for expired ones. A run's own
-- holders (holder = run_id) are found by scope (the primary key) and by run (tidegate_holders_run);
-- their lease lapses with the run's, which the orphan sweep reads from tidegate_runs. Kept out of
-- these two indexes, each of a limited claim's holder rows (one per scope per run) costs two index
-- entries instead of four, written at the claim and vacuumed after the run ends (issue 29, cost of
-- limits). Only indexes change: rows in flight are untouched, and the queries that read step holders
-- by holder or expiry say `holder <> run_id`, which every step holder satisfies.
DROP INDEX tidegate_holders_holder;
DROP INDEX tidegate_holders_expiry;
CREATE INDEX tidegate_holders_holder ON tidegate_holders (holder) WHERE holder <> run_id;
CREATE INDEX tidegate_holders_expiry ON tidegate_holders (expires_at) WHERE holder <> run_id;
