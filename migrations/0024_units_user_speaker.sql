-- Who speaks in a user's conversations (shared/memory/search_reads.py): a skip scan of this index takes one step
-- per person, where the user's units by date (memory_chunks_unit_user_idx) would be read whole. Partial, as only
-- message units have a speaker.
CREATE INDEX IF NOT EXISTS memory_chunks_user_speaker_idx ON memory_chunks (user_id, speaker)
    WHERE message_id IS NOT NULL AND speaker IS NOT NULL;
