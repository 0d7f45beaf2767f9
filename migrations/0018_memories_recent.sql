-- A user's active memories most recently changed first (the console's memory list, its pages and its
-- time filter; the users page's last activity): without it a page sorts every active memory of the user.
-- Partial, as the lists read active memories only; (updated_at, id) is the lists' order, read either way.
CREATE INDEX IF NOT EXISTS memories_user_recent_idx ON memories (user_id, updated_at DESC, id DESC)
    WHERE valid_until IS NULL;
