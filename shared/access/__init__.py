"""Who may do what, and how much: API keys, their scopes and the tenant each is bound to (auth),
managing keys (keys), a tenant's monthly token budget (quotas) and request rate limits (ratelimit)."""
