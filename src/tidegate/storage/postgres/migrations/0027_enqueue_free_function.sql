-- The one-statement submit (`enqueue_free`, runs.sql) as a server-side function (issue 29,
-- benchmarks/results/pooler.md). Through a transaction-mode pooler nothing is prepared, so the
-- statement used to be parsed and planned at every submit: a CTE of two inserts over
-- jsonb_to_recordset cost about as much to parse and plan as to run, and a pooled submit ran at
-- about half the rate of a direct one. PL/pgSQL keeps the plan of each statement of a function
-- per server session, and a pooler keeps its server sessions, so a pooled client now sends a call
-- that is quick to plan and the body is planned once per server session; a direct connection
-- prepares the call as it prepared the statement. The body is the statement as it was, one
-- statement (one snapshot, its locking read of the rules version as before): the parameters are
-- p_runs, p_known and p_now, the clock read by the caller (`tidegate_now()`, written out by the
-- pooled adapter: a function never reads another client's session setting). Returns whether it
-- stored the batch (false: the rules version moved, nothing stored).
CREATE OR REPLACE FUNCTION tidegate_enqueue_free(p_runs jsonb, p_known text, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_same boolean;
    v_woken bigint;  -- the wake-up, delivered at commit (only read so that it is sent)
BEGIN
    WITH current_rules AS MATERIALIZED (
        SELECT coalesce((SELECT value = p_known FROM tidegate_settings WHERE name = 'rules_version'
                         FOR SHARE), false)
               AS same
    ), new AS (
        SELECT * FROM jsonb_to_recordset(p_runs) AS r(
            n integer, id text, task text, queue text, partition_key text, rate_key text, rate_cost integer, priority integer, args jsonb,
            tags jsonb, concurrency_key text, max_attempts integer, retry_backoff double precision,
            timeout double precision, delay double precision, deadline double precision, trace_context text)
        WHERE (SELECT same FROM current_rules)
    ), stored AS (
        INSERT INTO tidegate_runs (
            id, task, queue, partition_key, rate_key, rate_cost, status, priority, args, tags, concurrency_key, attempt,
            max_attempts, retry_backoff, timeout, submitted_at, queued_at, scheduled_at, deadline_at, trace_context)
        SELECT id, task, queue, partition_key, rate_key, rate_cost, 'queued', priority, args, tags, concurrency_key, 0, max_attempts,
               retry_backoff, timeout, p_now, p_now, p_now + make_interval(secs => delay),
               p_now + make_interval(secs => deadline), trace_context
        FROM new ORDER BY n
    ), queued AS (
        INSERT INTO tidegate_events (run_id, step_key, type, metadata, at)
        SELECT id, NULL, 'RunQueued', jsonb_build_object('queue', queue), p_now
        FROM new ORDER BY n
    )
    SELECT c.same, (SELECT count(pg_notify('tidegate_' || md5(current_schema()), '')) FROM current_rules WHERE same)
    INTO v_same, v_woken
    FROM current_rules AS c;
    RETURN v_same;
END
$$;
