-- SQLite queries of schema.py: migrations and the schema version.
-- Conventions (parameters, clock, batches): database.sql.

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at) VALUES (:version, :name, :now);
