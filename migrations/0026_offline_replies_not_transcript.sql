-- The offline provider's replies (shared/llm/offline.py, is_offline_reply) echo the user or list memories:
-- rules, not conversation. They get no transcript unit and no line in another unit's context, so a search
-- or a context block never spends a place on "I received: …" beside the words it quotes; extraction and
-- summaries skip them too (shared/pipeline/extraction.is_conversational).
CREATE OR REPLACE FUNCTION engram_is_conversational(role text, content text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT role IN ('user', 'assistant') AND content ~ '\S' AND content !~* '^\s*<steering'
       AND NOT (role = 'assistant' AND starts_with(content, '[offline mode (no language model)]'))
$$;

-- Units already written: each such reply's own unit goes, and the two after it are rebuilt without it.
SELECT engram_rebuild_units_around(session_id, turn_id, id)
  FROM session_messages
 WHERE role = 'assistant' AND starts_with(content, '[offline mode (no language model)]');
