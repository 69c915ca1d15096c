-- The admission ceiling's count of active runs never read this index: without statistics SQLite's
-- planner scanned the whole listing index for it, finished runs too. The count now sums a count
-- per live status, each on the index that serves it (runs.sql, enqueue_active), and every claim
-- and report no longer pays this index's upkeep.
DROP INDEX tidegate_runs_active;
