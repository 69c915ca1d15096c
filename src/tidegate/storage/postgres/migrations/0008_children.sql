-- Child runs and durable waits (issue 13).
-- A child records its parent, its root (the top of its tree) and its depth, and its position among
-- its parent's triggers (`child_index`, call order): a parent re-running its function after a wait
-- finds each earlier trigger answered by the child at that position, never triggering it twice.
-- `awaited`: the parent waits for this child (fire-and-forget children do not hold a wait up).
-- `on_parent_cancel`: 'cancel' (the default) or 'abandon' (kept when the parent is canceled).
-- A parent that waits is in the new status `waiting`: no worker, no lease; `wait_kept` and
-- `wait_released` are the run-level scopes it keeps and released (domain/waits.py decides),
-- `waiting_since` when its wait began (for `queue why` and the resume round-trip figures).
ALTER TABLE tidegate_runs DROP CONSTRAINT IF EXISTS tidegate_runs_status_check;
ALTER TABLE tidegate_runs ADD CONSTRAINT tidegate_runs_status_check
    CHECK (status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'canceled'));

ALTER TABLE tidegate_runs ADD COLUMN parent_id text;
ALTER TABLE tidegate_runs ADD COLUMN root_id text;
ALTER TABLE tidegate_runs ADD COLUMN depth integer NOT NULL DEFAULT 0;
ALTER TABLE tidegate_runs ADD COLUMN child_index integer;
ALTER TABLE tidegate_runs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
ALTER TABLE tidegate_runs ADD COLUMN on_parent_cancel text NOT NULL DEFAULT 'cancel'
    CHECK (on_parent_cancel IN ('cancel', 'abandon'));
ALTER TABLE tidegate_runs ADD COLUMN wait_kept jsonb;
ALTER TABLE tidegate_runs ADD COLUMN wait_released jsonb;
ALTER TABLE tidegate_runs ADD COLUMN waiting_since timestamptz;

CREATE UNIQUE INDEX tidegate_runs_children ON tidegate_runs (parent_id, child_index) WHERE parent_id IS NOT NULL;
CREATE INDEX tidegate_runs_waiting ON tidegate_runs (id) WHERE status = 'waiting';
-- A waiting run is active: it counts against the admission ceilings (max_active).
DROP INDEX tidegate_runs_active;
CREATE INDEX tidegate_runs_active ON tidegate_runs (queue) WHERE status IN ('queued', 'running', 'waiting');
