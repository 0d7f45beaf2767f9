"""Adapters: engram's side of the outside services and third-party runtimes it talks to. Each implements a
domain protocol over something engram does not own: a remote API (Anthropic, OpenAI-compatible servers,
Slack's Web API, Telegram's Bot API) or a model runtime with its files (MiniLM on torch or onnxruntime).

- llm/: the chat providers over the official SDKs, their request layouts and their retry policy;
- embeddings/: the embedding models (OpenAI-compatible endpoint, MiniLM on torch, MiniLM on onnxruntime);
- sdk_clients.py: the process's OpenAI and Anthropic SDK clients, configured from engram's settings alone;
- slack_web_api.py, telegram_bot_api.py: the platform calls reply delivery makes.

The rule (a `lint-imports` contract): an adapter imports shared.infra and the protocol module it implements
(shared.llm.types, shared.embeddings.base, shared.channels.errors), never a domain service. The domain
picks an adapter (shared.llm.factory, shared.embeddings.providers, shared.channels.sending) and sees only
the protocol. In-process stand-ins written in engram itself, such as the offline rules provider
(shared/llm/offline.py), are domain code, not adapters.
"""
