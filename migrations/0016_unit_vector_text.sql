-- What a transcript unit's vector is made of: its message (its first 100 words), then the last 30 words said
-- before it in the session (from the two messages before it, the nearest last), where a reply's question
-- usually is. Full text keeps all of the message and of both messages before it (weight D).
--
-- Embedding the message with both whole messages cost about three times the model time of the message alone,
-- and under ops/bench/pipeline's default load the transcript's vectors took most of the background worker's
-- CPU. On the LoCoMo retrieval benchmark (dev file, hybrid recall@10 / multi-hop): whole messages 0.782 / 0.495,
-- the message alone 0.748 / 0.472, with 16 words 0.770 / 0.498, with 30 words 0.784 / 0.508.
-- A message's first 100 words (about 130 word pieces: the model was trained on 128) bound the cost of a long
-- one; the whole message was cut at 256 word pieces before.
--
-- The unit's text and hash follow (`text` is what the drain embeds); a rebuilt unit is rewritten when its full
-- text index changed even if its text did not (a neighbour edited). Existing units keep their vectors: both
-- texts embed the same message in the same space, and an upgrade should not re-embed every message.

CREATE OR REPLACE FUNCTION engram_build_transcript_unit(p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    m record;
    focus text;
    context text;
    words text[];
    head text;  -- the part of the message embedded
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
    words := regexp_split_to_array(focus, '\s+');
    head := CASE WHEN cardinality(words) > 100 THEN array_to_string(words[1:100], ' ') ELSE focus END;
    body := head;
    IF context <> '' THEN
        words := regexp_split_to_array(btrim(context), '\s+');
        body := body || E'\n\nContext: ' || array_to_string(words[greatest(1, cardinality(words) - 29):], ' ');
    END IF;
    INSERT INTO memory_chunks (tenant_id, user_id, session_id, message_id, chunk_index, text, start_char, end_char,
                               content_hash, said_at, speaker, search_tsv)
    VALUES (m.tenant_id, m.user_id, m.session_id, m.id, 0, body, 0, length(head),
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
       OR memory_chunks.speaker IS DISTINCT FROM EXCLUDED.speaker
       OR memory_chunks.search_tsv IS DISTINCT FROM EXCLUDED.search_tsv;
END
$$;

-- Every unit rebuilt by the one definition above, keeping the vector it had.
CREATE TEMPORARY TABLE unit_vectors AS
    SELECT message_id, embedding, embedded_at FROM memory_chunks WHERE message_id IS NOT NULL AND embedding IS NOT NULL;
SELECT engram_build_transcript_unit(id) FROM session_messages ORDER BY id;
UPDATE memory_chunks c SET embedding = v.embedding, embedded_at = v.embedded_at
  FROM unit_vectors v WHERE c.message_id = v.message_id AND c.embedding IS NULL;
DROP TABLE unit_vectors;
