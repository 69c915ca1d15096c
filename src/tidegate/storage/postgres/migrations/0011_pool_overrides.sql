-- Pools like every other limit (issue 15): the code's declaration and a live
-- override are kept apart; "limit" and lease_seconds stay the values in force,
-- which every claim reads (domain/pool_settings.py decides which wins).
-- Pools configured before this migration keep their value as the code's.
ALTER TABLE tidegate_pools ADD COLUMN declared_limit integer CHECK (declared_limit >= 0);
ALTER TABLE tidegate_pools ADD COLUMN declared_lease double precision CHECK (declared_lease > 0);
ALTER TABLE tidegate_pools ADD COLUMN override_limit integer CHECK (override_limit >= 0);
ALTER TABLE tidegate_pools ADD COLUMN override_lease double precision CHECK (override_lease > 0);
ALTER TABLE tidegate_pools ADD COLUMN version integer NOT NULL DEFAULT 0;
UPDATE tidegate_pools SET declared_limit = "limit", declared_lease = lease_seconds;

-- Every pool a step has asked for, configured or not, so `pools list` shows an
-- unconfigured one after its steps are done.
CREATE TABLE tidegate_pools_asked (
    name           text COLLATE "C" PRIMARY KEY,
    first_asked_at timestamptz NOT NULL
);
