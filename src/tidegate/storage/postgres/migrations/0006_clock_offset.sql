-- The store's time: the server's clock, moved forward by the injected clock's
-- offset (domain/clock.py), so a test advances time instead of sleeping while
-- every process still reads one clock. The offset is a session setting the
-- adapter sets on a connection only when it is not zero (database.py); unset
-- or empty means 0, so production costs one setting lookup per evaluation.
-- STABLE SQL functions of one expression are inlined by the planner: each is
-- the bare now() / statement_timestamp() expression, evaluated as those are.
CREATE FUNCTION tidegate_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT now() + make_interval(secs => coalesce(nullif(current_setting('tidegate.clock_offset', true), '')::double precision, 0))
$$;

-- The same offset on statement_timestamp(): claims stamp leases with the time
-- their statement began, after the locks it waited for (claims.sql).
CREATE FUNCTION tidegate_statement_timestamp() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT statement_timestamp() + make_interval(secs => coalesce(nullif(current_setting('tidegate.clock_offset', true), '')::double precision, 0))
$$;
