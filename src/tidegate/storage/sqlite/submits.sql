-- SQLite queries of submits.py: a submit in the caller's transaction.

-- name: submit_in_lock
-- A write that changes nothing: it makes the caller's open transaction the writer (SQLite's
-- write lock, held until it ends), so the ceilings and keys it reads next stay as read.
UPDATE tidegate_runs SET id = id WHERE 0;
