"""How a platform call failed, as the delivery loop needs to know it."""

from __future__ import annotations


class SendError(Exception):
    """A platform call failed. The message never holds a secret (callers build it from status and reason)."""


class RetryableSendError(SendError):
    """429, 5xx or a network error: try again, after `retry_after` seconds when the platform said so."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentSendError(SendError):
    """The platform refused the message for good (bad token, unknown channel, bot blocked)."""


class FormattingRejected(PermanentSendError):
    """Telegram could not parse the MarkdownV2 entities: the part is sent again as plain text."""
