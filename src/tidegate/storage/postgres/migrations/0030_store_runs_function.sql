-- The insert of new runs, written once: every PostgreSQL path that stores runs calls
-- tidegate_store_runs (issue 29). It was written four times (the one-statement submit of 0027,
-- the keyed one-statement submit, the full-way `enqueue`, a trigger's children), and a copy that
-- drifts stores a run another path would store differently.
--
-- It stores the batch p_runs (a JSON array of runs as records.new_run_row writes them, each with
-- its place `n`) and a RunQueued event per run, in that order, at the caller's time p_now (the
-- caller reads the clock: a function never reads another client's session setting through a
-- pooler). A trigger's children come with their parent (p_parent, p_root, p_depth) and each with
-- its place among the parent's children (`child_index`, `awaited`, `on_parent_cancel`); a submit
-- gives none, and its runs take the columns' defaults. Returns the number of runs stored.
--
-- It decides nothing: the caller has judged the batch (ceilings, keys, the rules version) and
-- calls it only to store. PL/pgSQL keeps the statement's plan per server session, through a
-- transaction-mode pooler too.
CREATE OR REPLACE FUNCTION tidegate_store_runs(
    p_runs jsonb, p_now timestamptz, p_parent text DEFAULT NULL, p_root text DEFAULT NULL, p_depth integer DEFAULT 0
) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_stored integer;
BEGIN
    WITH new AS (
        SELECT * FROM jsonb_to_recordset(p_runs) AS r(
            n integer, id text, task text, queue text, partition_key text, rate_key text, rate_cost integer, priority integer, args jsonb,
            tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
            timeout double precision, delay double precision, deadline double precision, trace_context text,
            child_index integer, awaited boolean, on_parent_cancel text)
    ), stored AS (
        INSERT INTO tidegate_runs (
            id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt,
            max_attempts, retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at,
            parent_id, root_id, depth, child_index, awaited, on_parent_cancel, trace_context)
        SELECT id, task, queue, partition_key, rate_key, rate_cost, 'queued', priority, args, tags, concurrency_key, 0,
               max_attempts, retry_backoff, timeout, p_now, p_now, p_now + make_interval(secs => delay),
               p_now + make_interval(secs => deadline),
               -- a submitted run: no parent, and the columns' defaults (0001, 0008)
               p_parent, p_root, p_depth, child_index, coalesce(awaited, false), coalesce(on_parent_cancel, 'cancel'),
               trace_context
        FROM new ORDER BY n
    )
    INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
    SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), p_now
    FROM new ORDER BY n;
    GET DIAGNOSTICS v_stored = ROW_COUNT;
    RETURN v_stored;
END
$$;

-- 0027's one-statement submit, its inserts now tidegate_store_runs: the same guard (the rules
-- version read FOR SHARE, runs.sql's `enqueue_free` says why), the same wake-up.
CREATE OR REPLACE FUNCTION tidegate_enqueue_free(p_runs jsonb, p_known text, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_same boolean;
    v_stored integer;
    v_woken bigint;  -- the wake-up, delivered at commit (only read so that it is sent)
BEGIN
    WITH current_rules AS MATERIALIZED (
        SELECT coalesce((SELECT value = p_known FROM tidegate_settings WHERE name = 'rules_version'
                         FOR SHARE), false)
               AS same
    ), stored AS (
        SELECT tidegate_store_runs(p_runs, p_now) AS runs
        WHERE (SELECT same FROM current_rules)
    )
    SELECT c.same, (SELECT runs FROM stored),
           (SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) FROM current_rules WHERE same)
    INTO v_same, v_stored, v_woken
    FROM current_rules AS c;
    RETURN v_same;
END
$$;
