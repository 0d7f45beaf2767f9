"""Chat providers over the official `anthropic` and `openai` SDKs (streamed.py: one streamed request, retried by
retry.py's policy while nothing has reached the caller), each with the request layout its prompt cache wants."""
