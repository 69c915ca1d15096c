-- Resumed parents go first (issue 13, item 5): a run queued again because the
-- children it waited for ended is claimed ahead of every other queued run of
-- its queue, whatever their priority (domain.admission.claim_order). `resumed`
-- is set by resume_parents and cleared by the claim that takes the run; it
-- leads the claim indexes, so the claim still walks one index in its order.
ALTER TABLE tidegate_runs ADD COLUMN resumed INTEGER NOT NULL DEFAULT 0;

DROP INDEX tidegate_runs_claim;
CREATE INDEX tidegate_runs_claim ON tidegate_runs (queue, resumed DESC, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
DROP INDEX tidegate_runs_partition;
CREATE INDEX tidegate_runs_partition ON tidegate_runs (queue, partition_key, resumed DESC, priority DESC, scheduled_at, id)
    WHERE status = 'queued';
