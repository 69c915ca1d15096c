-- Weighted rates (domain/rates.py): the cost units a run takes of every window of its queue's
-- rate, from its task's `rate_cost` (a whole number, or a function of its args evaluated at
-- submit) or the submit's own; the claim charges it (domain/admission.py, `Candidate.rate_cost`).
ALTER TABLE tidegate_runs ADD COLUMN rate_cost INTEGER NOT NULL DEFAULT 1;

-- A task's `rate_cost` when it is a whole number, registered with its other defaults so that a
-- submit by name from a process without the task's code charges it. NULL: a function of the
-- args, which only the task's code can evaluate (such a submit must give the cost itself).
ALTER TABLE tidegate_tasks ADD COLUMN rate_cost INTEGER DEFAULT 1;
