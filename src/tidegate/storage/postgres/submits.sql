-- PostgreSQL queries of submits.py: a submit in the caller's transaction. Conventions: database.sql.

-- name: submit_identity
-- Which database and schema the store works in: a caller's connection must be in the same.
SELECT current_database(), current_schema();

-- name: submit_in_check
-- The caller's connection, in its transaction (this statement opens it if none is): its database,
-- schema and isolation, and the injected clock's offset for the rest of that transaction only
-- (tidegate_now() reads it; LOCAL, so the caller's session keeps nothing of tidegate's).
SELECT current_database(), current_schema(), current_setting('transaction_isolation'),
       set_config('tidegate.clock_offset', %(offset)s::text, true);
