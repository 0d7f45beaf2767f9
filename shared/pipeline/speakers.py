"""Whether the conversation an extraction reads is between several people, so its facts name them.

A session's user messages can come from more than one person: an imported two-person transcript has both
people as role "user", each message carrying its speaker's `name`. Its facts must say whose they are
("Caroline is allergic to peanut" under `person/caroline/...`), or one person's facts would be told as the
user's and replace the other's under the same key. A conversation of one person (engram's own chat turns,
named after the profile's display_name or not at all; a one-person import; messages without names) keeps
"User …" and `user/...` keys.

The rule: a conversation has several speakers when its user messages carry at least two different names
(as shown in the transcript, case ignored), judged over the whole session, not the batch one extraction
reads: a later batch that holds only one of the two people's lines still names them. The batch's own names
decide when they are already two, or when there are none (an unnamed line is the user's either way);
otherwise one read of the session's distinct user names decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from shared.infra.db import Conn
from shared.pipeline.extraction import TranscriptMessage, user_speakers

# Two names settle it; a few more are read so the answer does not depend on which rows come first.
_MOST_NAMES: Final = 8

# The session's user rows by the (session_id, turn_id, id) index: one read per extraction job, bounded by the
# session's length (a few thousand index entries for the longest chat), never a query per message.
_SESSION_NAMES: Final = """SELECT DISTINCT name FROM session_messages
    WHERE session_id = %s AND role = 'user' AND name IS NOT NULL LIMIT %s"""


def several_speakers(conn: Conn, session_id: int, messages: Sequence[TranscriptMessage]) -> bool:
    """True when the session's user messages come from at least two named people (see the module docstring)."""
    names = user_speakers(messages)
    if len(names) != 1:
        return len(names) > 1
    rows = conn.execute(_SESSION_NAMES, (session_id, _MOST_NAMES)).fetchall()
    return len(names | user_speakers(TranscriptMessage(0, "user", "", row["name"]) for row in rows)) > 1
