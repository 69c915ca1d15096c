-- Snoozes (domain/snooze.py): attempts that ended `raise Snooze(...)`, not charged to the run
-- (they grow max_attempts by one each, like the causes of 0018) and capped by the task's max_snoozes.
ALTER TABLE tidegate_runs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

-- Adaptive limits (domain/adaptive.py): the effective limit of each adaptive queue or partition
-- (target `queue:NAME` or `queue:NAME/PARTITION`), the successes since it last moved, and when it was
-- last lowered and why it last moved. Read into the rules (a change moves the rules version); written in the
-- transaction that records the outcomes it follows.
CREATE TABLE tidegate_adaptive_limits (
    target TEXT PRIMARY KEY,
    "limit" INTEGER NOT NULL,
    successes INTEGER NOT NULL DEFAULT 0,
    lowered_at REAL NOT NULL DEFAULT 0,
    reason TEXT
);
