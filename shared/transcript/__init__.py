"""The transcript as memory: every conversational message is a search unit (migration 0015)."""
