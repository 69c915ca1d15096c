-- Runs and events churn: every run is inserted, updated two or three times and, with retention,
-- deleted. Autovacuum's default waits for a fifth of a table to be dead before it reclaims any
-- of it, so a table pruned by retention kept growing for minutes after the prune began
-- (benchmarks/soak.py). A fiftieth keeps the dead share, and the space no row reuses, small;
-- the same share of inserts keeps the visibility map fresh for the index-only counts.
ALTER TABLE tidegate_runs SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);
ALTER TABLE tidegate_events SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);
