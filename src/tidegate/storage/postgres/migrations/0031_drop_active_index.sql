-- Nothing here: SQLite's 0031 drops an index its planner never read for the admission ceiling's
-- count. PostgreSQL's planner reads its own copy: an index-only count of the live runs, where
-- tidegate_runs_status would count them through the table. The number is taken so that the
-- dialects number their migrations alike.
SELECT 1;
