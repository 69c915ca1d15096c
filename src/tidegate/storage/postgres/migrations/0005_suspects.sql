-- Suspects: a crash is charged to the run that caused it (domain/recovery.py).
-- `suspect`: rescued from a worker that was lost; its next attempt runs alone
-- on its worker, and a completed or otherwise reported attempt clears it.
-- `rescued_from`: the worker it was last rescued from, so that a rescue can
-- tell whether the run shared its lost worker with others, even with runs of
-- that worker already rescued by an earlier sweep.
ALTER TABLE tidegate_runs ADD COLUMN suspect boolean NOT NULL DEFAULT false;
ALTER TABLE tidegate_runs ADD COLUMN rescued_from text;

CREATE INDEX tidegate_runs_rescued_from ON tidegate_runs (rescued_from) WHERE rescued_from IS NOT NULL;
