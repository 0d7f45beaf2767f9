-- A user's active memories newest created first (the console's memory list ordered by creation, and its
-- window on the creation date): without it a page sorts every active memory of the user. Partial, as the
-- list reads active memories only; (created_at, id) is the list's order, read either way.
CREATE INDEX IF NOT EXISTS memories_user_created_idx ON memories (user_id, created_at DESC, id DESC)
    WHERE valid_until IS NULL;
