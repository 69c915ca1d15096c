-- A run's trace context (W3C traceparent, with tracestate when there is one): written at submit
-- from the producer span, read at claim so each attempt's span joins the submitter's trace
-- (tidegate/engine/tracing.py). NULL when nothing traced the submit.
ALTER TABLE tidegate_runs ADD COLUMN trace_context TEXT;
