"""The GET parameters of the console's list pages, read so that a bad one is said beside its field: the page is
still shown, with the field's message and without that filter (the list as if it were not given), instead of
an error page. A malformed URL is a typo to correct, not a failure."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date

from fastapi import status

from shared.console.paging import MAX_PAGE

# A page shown with bad parameters says so in its status too (htmx keeps what it shows on a 4xx answer).
INVALID = status.HTTP_422_UNPROCESSABLE_CONTENT


@dataclass
class Filters:
    """The problems found so far, {parameter: sentence}, for the template to show beside each field."""

    errors: dict[str, str] = field(default_factory=dict)

    @property
    def status_code(self) -> int:
        return INVALID if self.errors else status.HTTP_200_OK

    def page(self, raw: str, name: str = "page") -> int:
        """A page number (1 when missing or bad)."""
        text = raw.strip()
        if not text:
            return 1
        if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
            self.errors[name] = f"expected a page number from 1 to {MAX_PAGE} (it was {raw!r})"
            return 1
        return int(text)

    def choice(self, raw: str, choices: Collection[str], name: str, what: str, default: str = "") -> str:
        """One of `choices` (the default when missing or unknown); `what` names the choices in the message."""
        text = raw.strip()
        if not text:
            return default
        if text not in choices:
            self.errors[name] = f"unknown {what} {raw!r}; {what}s are {', '.join(choices)}"
            return default
        return text

    def day(self, raw: str, name: str) -> date | None:
        """A calendar date (None when missing or bad)."""
        text = raw.strip()
        if not text:
            return None
        try:
            return date.fromisoformat(text)
        except ValueError:
            self.errors[name] = f"expected a date such as 2026-03-01 (it was {raw!r})"
            return None

    def text(self, raw: str, name: str, longest: int) -> str:
        """Free text up to `longest` characters (empty when longer)."""
        if len(raw) > longest:
            self.errors[name] = f"at most {longest} characters (it has {len(raw)})"
            return ""
        return raw

    def refuse(self, name: str, message: str) -> None:
        self.errors.setdefault(name, message)
