-- PostgreSQL queries of schema.py: migrations and the schema version.
-- Conventions (parameters, clock, batches): database.sql.

-- name: migrate_lock
-- Workers starting together all try to migrate; one at a time per schema.
SELECT pg_advisory_xact_lock(hashtext('tidegate:migrate'), hashtext(coalesce(current_schema(), '')));

-- name: migrate_version_table
CREATE TABLE IF NOT EXISTS tidegate_schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version_exists
SELECT to_regclass('tidegate_schema_version') IS NOT NULL;

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: applied_versions
SELECT version FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at)
VALUES (%(version)s::integer, %(name)s::text, now());
