-- A session's transcript units in the order they were said, for the lines a speaker said just before and after a
-- search hit (shared/memory/speaker_lines.py): each is one step of this index, not a scan of the session.
CREATE INDEX IF NOT EXISTS memory_chunks_session_message_idx ON memory_chunks (session_id, message_id)
    WHERE message_id IS NOT NULL;
