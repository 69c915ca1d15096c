-- A task's `Unique` rule (domain/keys.py: CheckedUnique.to_json), registered with its other
-- defaults so that a submit by name from a process without the task's code (the CLI, the
-- HTTP API of a bare server, a schedule's tick, a child) applies it. NULL: no rule.
ALTER TABLE tidegate_tasks ADD COLUMN unique_rule TEXT;
