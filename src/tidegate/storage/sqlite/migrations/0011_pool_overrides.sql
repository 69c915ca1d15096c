-- Pools like every other limit (issue 15): the code's declaration and a live
-- override are kept apart; "limit" and lease_seconds stay the values in force,
-- which every claim reads (domain/pool_settings.py decides which wins).
-- Pools configured before this migration keep their value as the code's.
ALTER TABLE tidegate_pools ADD COLUMN declared_limit INTEGER CHECK (declared_limit >= 0);
ALTER TABLE tidegate_pools ADD COLUMN declared_lease REAL CHECK (declared_lease > 0);
ALTER TABLE tidegate_pools ADD COLUMN override_limit INTEGER CHECK (override_limit >= 0);
ALTER TABLE tidegate_pools ADD COLUMN override_lease REAL CHECK (override_lease > 0);
ALTER TABLE tidegate_pools ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
UPDATE tidegate_pools SET declared_limit = "limit", declared_lease = lease_seconds;

-- Every pool a step has asked for, configured or not, so `pools list` shows an
-- unconfigured one after its steps are done.
CREATE TABLE tidegate_pools_asked (
    name           TEXT PRIMARY KEY,
    first_asked_at REAL NOT NULL
);
