-- Pausing a queue (issue 12): a paused queue keeps its runs queued and admits none of them.
-- A column of the queue row, not of its declared config, so that re-registering the code's
-- declaration never resumes a queue an operator paused. Read with the rules (limits.sql).
ALTER TABLE tidegate_queues ADD COLUMN paused boolean NOT NULL DEFAULT false;
