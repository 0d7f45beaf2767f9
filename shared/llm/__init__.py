"""Chat models as the domain sees them: the provider protocol and its records (types.py), the provider and
models the settings pick (factory.py), the offline rules provider, the call ledger and per-model prices. The
SDK-backed providers are adapters (shared/adapters/llm/)."""
