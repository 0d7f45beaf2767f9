-- "Is the same content already stored under another key of this user and namespace?" was answered by
-- reading every active memory of similar length and comparing fingerprints in Python: O(memories) per
-- store. `content_key` is sha256 of shared/memory/keys.content_fingerprint, set by every insert, so the
-- check is one probe of memories_content_key_idx.
--
-- SQL cannot reproduce the fingerprint (NFKC, casefold), so existing rows start NULL: the store still
-- compares them the old way (through memories_content_key_legacy_idx) until the nightly decay job has
-- keyed them (shared/memory/content_keys.py, per user). Once none are left that index is empty and the
-- legacy check is a probe that finds nothing.
ALTER TABLE memories ADD COLUMN IF NOT EXISTS content_key bytea;

CREATE INDEX IF NOT EXISTS memories_content_key_idx ON memories (user_id, namespace, content_key)
    WHERE valid_until IS NULL AND content_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_content_key_legacy_idx ON memories (user_id, namespace)
    WHERE valid_until IS NULL AND content_key IS NULL;
