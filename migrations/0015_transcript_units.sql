-- Transcript units: every conversational message is a search unit from the moment it is stored.
--
-- A unit is a row of `memory_chunks` with `message_id` set (and `memory_id` NULL): the message, said by
-- `speaker` at `said_at`, with the two conversational messages before it in its session as context (never
-- across sessions): a reply ("Yes, twice!") is found through what led to it. A message's unit does not
-- change when later ones arrive, so appending to a conversation embeds each message once. (A message after
-- it as context too measured the same recall on the LoCoMo retrieval benchmark and would embed each again.) `search_tsv` indexes the message's words at weight B and
-- the context's at D, like a memory's value and `metadata.context` (search.TERM_WEIGHTS), so full text
-- finds a unit in the commit that stored its message. `text` is what the embedding drain embeds
-- (shared/transcript/units.py), `embedding` stays NULL until it has: vectors follow within seconds.
--
-- The trigger keeps units in step with their messages in the writer's transaction, whichever door wrote
-- them (chat turns, ingest, channels, imports): an inserted, edited or deleted message rebuilds its own
-- unit and those whose context it is part of (the two after it); a unit whose text changed loses its vector until the drain
-- embeds the new text. Deleting a session or a user deletes its units with its messages (foreign keys).
--
-- Compaction no longer indexes the transcript: its five-message blocks are deleted here, and with them
-- the columns that tracked them. The messages' own generated tsvector goes too: the units are the one
-- full-text index of what was said.

ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS message_id bigint REFERENCES session_messages(id) ON DELETE CASCADE;
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS said_at timestamptz;
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS speaker text;
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS search_tsv tsvector;
-- When the unit's vector was stored (its `created_at` is when the message was): the lag to "searchable by meaning".
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS embedded_at timestamptz;

DELETE FROM memory_chunks WHERE memory_id IS NULL AND message_id IS NULL;

CREATE UNIQUE INDEX IF NOT EXISTS memory_chunks_message_idx ON memory_chunks (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_chunks_unit_tsv_idx ON memory_chunks USING gin (search_tsv)
    WHERE message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_chunks_unit_user_idx ON memory_chunks (user_id, said_at)
    WHERE message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_chunks_unit_pending_idx ON memory_chunks (id)
    WHERE message_id IS NOT NULL AND embedding IS NULL;

DROP INDEX IF EXISTS session_messages_unembedded_idx;
DROP INDEX IF EXISTS session_messages_tsv_idx;
ALTER TABLE session_messages DROP COLUMN IF EXISTS embedded_at;
ALTER TABLE session_messages DROP COLUMN IF EXISTS search_tsv;

-- What extraction and summaries read too (shared/pipeline/extraction.is_conversational): a user or
-- assistant message with text that is not a steering hint.
CREATE OR REPLACE FUNCTION engram_is_conversational(role text, content text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT role IN ('user', 'assistant') AND content ~ '\S' AND content !~* '^\s*<steering'
$$;

-- "<speaker>: <text>": the client's name for the speaker when it gave one, else the role.
CREATE OR REPLACE FUNCTION engram_transcript_line(name text, role text, content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(btrim(regexp_replace(name, '[\[\]:\s]+', ' ', 'g')), ''), role) || ': ' || btrim(content)
$$;

-- The conversational messages of a session around one message, in session order ((turn_id, id), messages
-- without a turn first): up to `p_before` before it (side -1) and `p_after` after it (side 1). Each branch
-- is a range of session_messages_order_idx read in order and stopped by its LIMIT, so a long session
-- costs no more than a short one.
CREATE OR REPLACE FUNCTION engram_neighbour_ids(p_session bigint, p_turn bigint, p_id bigint, p_before integer, p_after integer)
RETURNS TABLE (id bigint, side integer)
LANGUAGE sql STABLE AS $$
    (SELECT x.id, -1 FROM (
        (SELECT b.id, 1 AS grp, b.turn_id FROM session_messages b
          WHERE p_turn IS NOT NULL AND b.session_id = p_session AND (b.turn_id, b.id) < (p_turn, p_id)
            AND engram_is_conversational(b.role, b.content)
          ORDER BY b.turn_id DESC, b.id DESC LIMIT p_before)
        UNION ALL
        (SELECT b.id, 0, NULL FROM session_messages b
          WHERE b.session_id = p_session AND b.turn_id IS NULL AND (p_turn IS NOT NULL OR b.id < p_id)
            AND engram_is_conversational(b.role, b.content)
          ORDER BY b.id DESC LIMIT p_before)) x
      ORDER BY x.grp DESC, x.turn_id DESC, x.id DESC LIMIT p_before)
    UNION ALL
    (SELECT y.id, 1 FROM (
        (SELECT a.id, 0 AS grp, NULL::bigint AS turn_id FROM session_messages a
          WHERE p_turn IS NULL AND a.session_id = p_session AND a.turn_id IS NULL AND a.id > p_id
            AND engram_is_conversational(a.role, a.content)
          ORDER BY a.id LIMIT p_after)
        UNION ALL
        (SELECT a.id, 1, a.turn_id FROM session_messages a
          WHERE a.session_id = p_session AND a.turn_id IS NOT NULL
            AND (p_turn IS NULL OR (a.turn_id, a.id) > (p_turn, p_id))
            AND engram_is_conversational(a.role, a.content)
          ORDER BY a.turn_id, a.id LIMIT p_after)) y
      ORDER BY y.grp, y.turn_id, y.id LIMIT p_after)
$$;

-- (Re)build the unit of one message: insert it, replace its text (dropping the vector when the text
-- changed) or delete it when the message is gone or not conversational.
CREATE OR REPLACE FUNCTION engram_build_transcript_unit(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    m record;
    focus text;
    context text;
    body text;
BEGIN
    SELECT id, tenant_id, user_id, session_id, turn_id, role, content, name, created_at
      INTO m FROM session_messages WHERE session_messages.id = p_id;
    IF NOT FOUND OR NOT engram_is_conversational(m.role, m.content) THEN
        DELETE FROM memory_chunks WHERE message_id = p_id;
        RETURN;
    END IF;
    focus := engram_transcript_line(m.name, m.role, m.content);
    SELECT coalesce(string_agg(engram_transcript_line(s.name, s.role, s.content), E'\n'
                               ORDER BY s.turn_id NULLS FIRST, s.id), '')
      INTO context
      FROM engram_neighbour_ids(m.session_id, m.turn_id, m.id, 2, 0) n JOIN session_messages s ON s.id = n.id;
    body := CASE WHEN context = '' THEN focus ELSE focus || E'\n\nContext:\n' || context END;
    INSERT INTO memory_chunks (tenant_id, user_id, session_id, message_id, chunk_index, text, start_char, end_char,
                               content_hash, said_at, speaker, search_tsv)
    VALUES (m.tenant_id, m.user_id, m.session_id, m.id, 0, body, 0, length(focus),
            encode(sha256(convert_to(body, 'UTF8')), 'hex'), m.created_at,
            split_part(focus, ': ', 1),
            setweight(to_tsvector('english', focus), 'B') || setweight(to_tsvector('english', context), 'D'))
    ON CONFLICT (message_id) WHERE message_id IS NOT NULL DO UPDATE SET
        text = EXCLUDED.text,
        end_char = EXCLUDED.end_char,
        content_hash = EXCLUDED.content_hash,
        said_at = EXCLUDED.said_at,
        speaker = EXCLUDED.speaker,
        search_tsv = EXCLUDED.search_tsv,
        embedding = CASE WHEN memory_chunks.content_hash = EXCLUDED.content_hash THEN memory_chunks.embedding END,
        embedded_at = CASE WHEN memory_chunks.content_hash = EXCLUDED.content_hash THEN memory_chunks.embedded_at END,
        created_at = CASE WHEN memory_chunks.content_hash = EXCLUDED.content_hash THEN memory_chunks.created_at
                          ELSE now() END
    WHERE memory_chunks.content_hash IS DISTINCT FROM EXCLUDED.content_hash
       OR memory_chunks.said_at IS DISTINCT FROM EXCLUDED.said_at
       OR memory_chunks.speaker IS DISTINCT FROM EXCLUDED.speaker;
END
$$;

-- A message and every unit whose context holds it: the two after it. Appending a message builds its own
-- unit and finds nothing after it.
CREATE OR REPLACE FUNCTION engram_rebuild_units_around(p_session bigint, p_turn bigint, p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    neighbour bigint;
BEGIN
    PERFORM engram_build_transcript_unit(p_id);
    FOR neighbour IN SELECT n.id FROM engram_neighbour_ids(p_session, p_turn, p_id, 0, 2) n LOOP
        PERFORM engram_build_transcript_unit(neighbour);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION engram_transcript_units_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- A session or user being deleted takes every unit with it: nothing to rebuild.
        IF EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id) THEN
            PERFORM engram_rebuild_units_around(OLD.session_id, OLD.turn_id, OLD.id);
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.turn_id IS DISTINCT FROM NEW.turn_id THEN
        PERFORM engram_rebuild_units_around(OLD.session_id, OLD.turn_id, OLD.id);
    END IF;
    PERFORM engram_rebuild_units_around(NEW.session_id, NEW.turn_id, NEW.id);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS session_messages_transcript_units ON session_messages;
CREATE TRIGGER session_messages_transcript_units
    AFTER INSERT OR DELETE OR UPDATE OF role, content, name, created_at, turn_id ON session_messages
    FOR EACH ROW EXECUTE FUNCTION engram_transcript_units_trigger();

-- Every message stored before this migration becomes a unit now, in this transaction (a fraction of a
-- millisecond a message: minutes for millions); their vectors follow through the embedding drain, which the
-- pending-work sweep requests while any unit has none.
SELECT engram_build_transcript_unit(id) FROM session_messages ORDER BY id;
