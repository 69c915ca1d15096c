-- A wait that resumes when any awaited child ends (a workflow's sliding window of children,
-- wf.map_children): `wait_remaining` is the number of awaited children that may still be
-- unfinished when the waiting run is queued again. NULL (every wait before this, and every
-- task's wait) is 0: it resumes once all of them ended. Written by trigger_children_wait, read
-- by resume_parents, meaningful only while status = 'waiting'.
ALTER TABLE tidegate_runs ADD COLUMN wait_remaining INTEGER;
