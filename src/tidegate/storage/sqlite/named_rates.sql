-- SQLite queries of named_rates.py: named rates, declared by the code or overridden live.
-- Conventions (parameters, clock, batches): database.sql.

-- name: named_rate_row
SELECT declared, override, version FROM tidegate_named_rates WHERE name = :name;

-- name: save_named_rate
-- The rate's settings and the windows in force (which every step claim paying it reads).
INSERT INTO tidegate_named_rates (name, rates, declared, override, version, updated_at)
VALUES (:name, :rates, :declared, :override, :version, :now)
ON CONFLICT (name) DO UPDATE SET
    rates = excluded.rates, declared = excluded.declared, override = excluded.override,
    version = excluded.version,
    updated_at = CASE WHEN tidegate_named_rates.rates = excluded.rates
                      THEN tidegate_named_rates.updated_at ELSE excluded.updated_at END
RETURNING updated_at;

-- name: delete_named_rate
-- Reset with no declaration: the rate is gone (a step naming it fails with RateNotFound).
DELETE FROM tidegate_named_rates WHERE name = :name;

-- name: named_rates
-- Every declared rate, with the steps of live attempts waiting for it (their waiting_for names
-- its scope 'rate:@NAME').
SELECT n.name, n.rates, n.declared, n.override, n.version, n.updated_at,
       (SELECT count(*) FROM tidegate_steps AS s
        JOIN tidegate_runs AS r ON r.id = s.run_id AND r.status = 'running' AND r.attempt = s.attempt,
             json_each(s.waiting_for) AS w
        WHERE s.waiting_for IS NOT NULL AND w.key = 'rate:@' || n.name)
FROM tidegate_named_rates AS n
ORDER BY n.name;
