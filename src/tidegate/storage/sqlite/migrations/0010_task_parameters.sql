-- Task parameters (issues 12 and 15): what a run's args must be (names, required ones, JSON types),
-- stored with the task's defaults so that a submit by name is checked without the code; NULL for
-- a task registered before descriptions were stored (not checked). And the worker that last
-- registered the task, and when (`tidegate tasks list`); NULL until a worker has.
ALTER TABLE tidegate_tasks ADD COLUMN parameters TEXT;
ALTER TABLE tidegate_tasks ADD COLUMN worker_id TEXT;
ALTER TABLE tidegate_tasks ADD COLUMN worker_seen_at REAL;
