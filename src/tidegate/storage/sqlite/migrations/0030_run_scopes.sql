-- PostgreSQL's 0030 reads a run's own slots from its row instead of holder rows (the rows cost it
-- most of a limited claim's writes); SQLite, one writer at a time, keeps its holder rows. Both
-- name every holder, run or step, `tidegate_slot_holders`, so that what reads them all reads alike.
CREATE VIEW tidegate_slot_holders AS
SELECT scope, holder, run_id, attempt, worker_id, slots, claimed_at, expires_at FROM tidegate_holders;
