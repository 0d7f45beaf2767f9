"""The doors into a conversation: accepting chat turns and reading them back (accept), messages from
conversations engram does not run (ingest), OpenAI-compatible chat completions as turns (openai_compat) and what
such a caller asked of its turn (client_options)."""
