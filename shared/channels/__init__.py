"""Chat channels: Slack and Telegram connections, identities, inbound events and reply delivery."""
