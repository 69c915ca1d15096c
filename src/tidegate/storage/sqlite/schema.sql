-- SQLite queries of schema.py: migrations and the schema version.
-- Conventions (parameters, clock, batches): database.sql.

-- name: migrate_version_table
CREATE TABLE IF NOT EXISTS tidegate_schema_version (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

-- name: schema_version_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tidegate_schema_version';

-- name: schema_version
SELECT coalesce(max(version), 0) FROM tidegate_schema_version;

-- name: applied_versions
SELECT version FROM tidegate_schema_version;

-- name: record_migration
INSERT INTO tidegate_schema_version (version, name, applied_at) VALUES (:version, :name, :now);
