-- Suspects come back in groups (domain/recovery.py): `suspect_group` names the
-- group a suspect runs in next (halves of the crash it was rescued from). A
-- worker runs the suspects of one group at a time, beside any other work
-- (domain/admission.py). Set with `suspect` by the rescue, cleared with it when
-- an attempt reports an outcome. A suspect rescued before groups existed is a
-- group of its own.
ALTER TABLE tidegate_runs ADD COLUMN suspect_group TEXT;
UPDATE tidegate_runs SET suspect_group = 'run ' || id WHERE suspect = 1;
