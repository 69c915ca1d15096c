-- The keyed one-statement submit (unique.sql's `enqueue_unique_free`) takes the keys' locks and
-- writes them itself, guarded by ON CONFLICT; nothing calls the function 0025 made for it any more.
DROP FUNCTION IF EXISTS tidegate_unique_holders(text[]);
