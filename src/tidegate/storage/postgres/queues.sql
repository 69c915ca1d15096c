-- PostgreSQL queries of queues.py: each queue's run counts, and pausing or resuming a queue.
-- Conventions (parameters, clock, batches): database.sql.

-- name: queue_counts
-- Queued and running runs per queue (how many are blocked is derived: queued_shapes).
SELECT queue,
       count(*) FILTER (WHERE status = 'queued')::integer AS queued,
       count(*) FILTER (WHERE status = 'running')::integer AS running
FROM tidegate_runs WHERE status IN ('queued', 'running') GROUP BY queue ORDER BY queue;

-- name: set_queue_paused
-- Whether the queue is known, and whether its flag changed; when it did, the rules version
-- moves in the same statement, so every later claim reads the pause with the rules. The
-- caller holds the rules fence: pauses, limit changes and claims in flight are serialized.
WITH known AS (
    SELECT name, paused FROM tidegate_queues WHERE name = %(name)s::text
), changed AS (
    UPDATE tidegate_queues AS q SET paused = %(paused)s::boolean, updated_at = tidegate_now()
    FROM known WHERE q.name = known.name AND known.paused <> %(paused)s::boolean
    RETURNING q.name
), bumped AS (
    UPDATE tidegate_settings SET value = (value::bigint + 1)::text, updated_at = tidegate_now()
    WHERE name = 'rules_version' AND EXISTS (SELECT 1 FROM changed)
    RETURNING value
)
SELECT EXISTS (SELECT 1 FROM known), EXISTS (SELECT 1 FROM bumped);

-- name: set_queue_paused_deadlines
-- The queued runs of a resuming queue that have a dispatch deadline, in epoch seconds, with the
-- time of the queue's latest pause event (queue_paused in domain/events.py) and now: the adapter
-- moves each deadline by domain/deadlines.py. None when the pause was never audited.
SELECT r.id, extract(epoch FROM r.deadline_at)::double precision, extract(epoch FROM r.queued_at)::double precision,
       extract(epoch FROM p.at)::double precision, extract(epoch FROM tidegate_now())::double precision
FROM tidegate_runs AS r
CROSS JOIN LATERAL (
    SELECT max(at) AS at FROM tidegate_events
    WHERE run_id IS NULL AND type = 'LimitChanged'
      AND metadata ->> 'target' = 'queue:' || %(name)s::text AND (metadata ->> 'paused')::boolean
) AS p
WHERE r.queue = %(name)s::text AND r.status = 'queued' AND r.deadline_at IS NOT NULL AND p.at IS NOT NULL
ORDER BY r.depth DESC, r.id
FOR UPDATE OF r;

-- name: set_queue_paused_deadline
UPDATE tidegate_runs AS r SET deadline_at = to_timestamp(m.deadline_at)
FROM jsonb_to_recordset(%(moved)s::jsonb) AS m(id text, deadline_at double precision)
WHERE r.id = m.id AND r.status = 'queued';
