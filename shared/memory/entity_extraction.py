"""A fast, dependency-free entity extractor (the "regex" provider of the references).

It runs on every stored memory, so it must be cheap and predictable: precompiled patterns and a
few linear passes over the text. It finds

- "email"            alice@example.com              normalised: lowercased
- "url"              https://Example.com/a(b).       normalised: scheme+host lowercased, trailing
                                                     punctuation and "/" dropped, path case kept
- "mention"          @alice                          normalised: handle without "@", casefolded
- "hashtag"          #RustLang                       normalised: tag without "#", casefolded
- "person_or_thing"  Alice, New York, Bank of America, Caroline Smith

Capitalised names are the guessy part. A name is a run of 1–4 capitalised words separated only by
spaces (connectors such as "of"/"de"/"van" may sit between two of them). Words on a stopword list
(pronouns, question words, greetings, "User", weekdays and months) never belong to a name: days
and months are time expressions, not entities, and "May"/"March" are too ambiguous to keep. A
single word that merely starts a sentence is capitalised by grammar, not because it is a name,
so it is kept only if it is followed by another capitalised word or appears capitalised again
elsewhere in the text and never in lowercase ("Alice left. Alice won." keeps Alice; "Cooking
is fun." drops Cooking).

URLs and emails are found first and blanked out before the other patterns run, so the "@" of an
email is not a mention and a capitalised path segment is not a name. Mentions and hashtags are
blanked before names for the same reason.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

EMAIL = "email"
URL = "url"
MENTION = "mention"
HASHTAG = "hashtag"
PERSON_OR_THING = "person_or_thing"

MAX_NAME_WORDS = 4
MAX_QUERY_NAMES = 32


@dataclass(frozen=True)
class EntityMention:
    """One entity found in a text: `name` as written, `normalized` for matching, and its type."""

    name: str
    normalized: str
    entity_type: str


_URL = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'`]+", re.IGNORECASE)
_URL_PARTS = re.compile(r"((?:https?://)?)([^/?#]*)(.*)", re.IGNORECASE | re.DOTALL)
_URL_TRAILING = ".,;:!?'\")]}>*_~"
_EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_MENTION = re.compile(r"(?<![\w@])@(\w(?:[\w.-]*\w)?)")
_HASHTAG = re.compile(r"(?<![\w#&/])#(\w*[^\W\d_]\w*)")  # needs a letter: "#1" is not a tag
# A word: letters/digits, with inner hyphens or apostrophes ("Jean-Luc", "O'Brien", "Alice's").
_WORD = re.compile(r"[^\W_](?:[^\W_]|[-'’](?=[^\W_]))*")
_NAME_GAP = re.compile(r"[^\S\n]{1,3}")  # words of one name are separated by a few spaces, no newline
_POSSESSIVE = ("'s", "’s")

# Lowercase words that may join two capitalised words inside one name.
_CONNECTORS = frozenset({"of", "de", "del", "der", "van", "von", "da", "di", "du", "la", "le", "bin", "al"})

_DAYS_AND_MONTHS = (
    "monday tuesday wednesday thursday friday saturday sunday "
    "january february march april may june july august september october november december"
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOPWORDS = _words(
    _DAYS_AND_MONTHS + " i me my mine myself we us our ours you your yours he him his she her hers it its "
    "they them their theirs this that these those the a an and but or nor so yet if then else when where what "
    "which who whom whose why how is are was were be been am do does did have has had will would shall should "
    "can could might must not no yes yeah yep nope ok okay hi hello hey thanks thank please sure maybe also "
    "just there here all any some every each both in on at to of for with from by about as into after before "
    "since until while because although though today tomorrow yesterday tonight now later soon always never "
    "sometimes often let dear note fyi ps btw lol omg re user assistant agent bot"
)
# For queries, lowercase words are candidates too, so ordinary function words and the verbs of
# questions ("what did alice say about ...") must not become entity names.
_QUERY_STOPWORDS = _STOPWORDS | _words(
    "say said says tell told know knew remember recall think thought like likes liked get got go went going "
    "make made want wanted need needs see saw come came take took give gave find found favorite favourite "
    "thing things something anything everything nothing anyone someone everyone people person time times "
    "last next first much many more most other again ever very really only own same than too over under up "
    "down out off between through during without within whats "
    "don't doesn't didn't isn't aren't wasn't weren't dont doesnt didnt isnt arent wasnt werent "
    "mention mentioned talk talked ask asked use used name named live lives lived work works worked "
    "day days week weeks month months year years ago recently"
)


def normalize_entity_name(name: str) -> str:
    """Matching form of a name: NFKC, casefolded, whitespace collapsed, surrounding punctuation off.

    A trailing "#" is kept so "C#" and "F#" stay distinct from "C" and "F".
    """
    text = " ".join(unicodedata.normalize("NFKC", name).casefold().split())
    start, end = 0, len(text)
    while start < end and (text[start].isspace() or unicodedata.category(text[start]).startswith("P")):
        start += 1
    while start < end and (
        text[end - 1].isspace() or (unicodedata.category(text[end - 1]).startswith("P") and text[end - 1] != "#")
    ):
        end -= 1
    return text[start:end]


def _normalize_url(url: str) -> str:
    match = _URL_PARTS.match(url)
    assert match is not None  # every part of the pattern may be empty, so it always matches
    scheme, host, rest = match.groups()
    return (scheme.lower() + host.lower() + rest).rstrip("/")


def _trim_url(url: str) -> str:
    """Drop punctuation that ends the sentence rather than the URL; keep a balanced ")"."""
    while url and url[-1] in _URL_TRAILING:
        if url[-1] == ")" and url.count("(") >= url.count(")"):
            break
        url = url[:-1]
    return url


def _blank(chars: list[str], start: int, end: int) -> None:
    chars[start:end] = " " * (end - start)


def _strip_possessive(word: str) -> str:
    if len(word) > 2 and word.endswith(_POSSESSIVE):
        return word[:-2]
    return word


def _is_capitalised(word: str) -> bool:
    return word[0].isupper()


def _is_sentence_start(text: str, pos: int) -> bool:
    """Whether the word at `pos` opens the text, a line or a sentence (skipping quotes/bullets)."""
    i = pos - 1
    while i >= 0 and text[i] in " \t\"'“‘([{*•->–—":
        i -= 1
    return i < 0 or text[i] in ".!?:\n…"


def _is_name_word(word: str) -> bool:
    bare = _strip_possessive(word)
    return len(bare) >= 2 and _is_capitalised(bare) and bare.casefold() not in _STOPWORDS


def _name_spans(text: str, *, query: bool) -> list[tuple[int, int]]:
    """(start, end) spans of capitalised names in `text` (already blanked of urls/emails/tags)."""
    words = list(_WORD.finditer(text))
    capitalised_count: dict[str, int] = {}
    seen_lowercase: set[str] = set()
    for match in words:
        word = _strip_possessive(match.group())
        if _is_capitalised(word):
            capitalised_count[word.casefold()] = capitalised_count.get(word.casefold(), 0) + 1
        elif word[0].islower():
            seen_lowercase.add(word.casefold())

    spans: list[tuple[int, int]] = []
    group: list[re.Match[str]] = []  # the name words (and connectors between them) of the current run
    pending: re.Match[str] | None = None  # a connector waiting for the next capitalised word

    def flush() -> None:
        nonlocal pending
        pending = None
        if not group:
            return
        start, last = group[0].start(), group[-1]
        end = last.start() + len(_strip_possessive(last.group()))
        single = len(group) == 1
        if single and not query and _is_sentence_start(text, start):
            word = text[start:end].casefold()
            if capitalised_count.get(word, 0) < 2 or word in seen_lowercase:
                group.clear()
                return
        spans.append((start, end))
        group.clear()

    previous_end = -1
    for match in words:
        word = match.group()
        adjacent = previous_end >= 0 and _NAME_GAP.fullmatch(text, previous_end, match.start()) is not None
        previous_end = match.end()
        if not adjacent:
            flush()
        if _is_name_word(word):
            name_words = sum(1 for m in group if _is_name_word(m.group()))
            if group and name_words < MAX_NAME_WORDS and (pending is not None or adjacent):
                if pending is not None:
                    group.append(pending)
                    pending = None
            else:
                flush()
            group.append(match)
            if _strip_possessive(word) != word:  # "Alice's car": the possessive closes the name
                flush()
        elif group and pending is None and word in _CONNECTORS:
            pending = match
        else:
            flush()
    flush()
    return spans


def _find(text: str, *, query: bool) -> tuple[list[EntityMention], str]:
    """The mentions in `text`, and `text` with every url, email, mention and hashtag blanked out."""
    found: list[tuple[int, EntityMention]] = []
    chars = list(text)

    for match in _URL.finditer(text):
        url = _trim_url(match.group())
        parts = _URL_PARTS.match(url)
        if parts is None or not any(ch.isalnum() for ch in parts.group(2)):
            continue  # "https://." is not a link
        found.append((match.start(), EntityMention(url, _normalize_url(url), URL)))
        _blank(chars, match.start(), match.end())
    masked = "".join(chars)

    for match in _EMAIL.finditer(masked):
        email = match.group()
        found.append((match.start(), EntityMention(email, email.lower(), EMAIL)))
        _blank(chars, match.start(), match.end())
    masked = "".join(chars)

    for pattern, entity_type in ((_MENTION, MENTION), (_HASHTAG, HASHTAG)):
        for match in pattern.finditer(masked):
            normalized = normalize_entity_name(match.group(1))
            if normalized:
                found.append((match.start(), EntityMention(match.group(), normalized, entity_type)))
            _blank(chars, match.start(), match.end())
    masked = "".join(chars)

    for start, end in _name_spans(masked, query=query):
        name = text[start:end]
        found.append((start, EntityMention(name, normalize_entity_name(name), PERSON_OR_THING)))

    found.sort(key=lambda item: item[0])  # stable: equal starts keep the pass order
    unique: dict[tuple[str, str], EntityMention] = {}
    for _, mention in found:
        unique.setdefault((mention.entity_type, mention.normalized), mention)
    return list(unique.values()), masked


def extract_entities(text: str) -> list[EntityMention]:
    """Entities mentioned in `text`, one per (type, normalised name), in order of first appearance."""
    return _find(text, query=False)[0]


def _query_ngrams(text: str) -> list[str]:
    """Runs of 1–3 adjacent non-stopwords, longest first within each run ("new york" before "york")."""
    names: list[str] = []
    run: list[str] = []

    def close_run() -> None:
        for length in range(min(3, len(run)), 0, -1):
            for i in range(len(run) - length + 1):
                names.append(" ".join(run[i : i + length]))
        run.clear()

    previous_end = -1
    for match in _WORD.finditer(text):
        word = _strip_possessive(match.group()).casefold()
        adjacent = previous_end >= 0 and _NAME_GAP.fullmatch(text, previous_end, match.start()) is not None
        previous_end = match.end()
        if not adjacent:
            close_run()
        if len(word) < 2 or word.isdigit() or word in _QUERY_STOPWORDS:
            close_run()
        else:
            run.append(normalize_entity_name(word))
    close_run()
    return names


def query_entity_names(text: str) -> list[str]:
    """Normalised names in a search query worth matching against stored entities.

    Queries are often typed in lowercase ("what did caroline say about new york"), where
    capitalisation cannot tell a name from a word. So besides what `extract_entities` finds
    (emails, URLs, @mentions, #hashtags, capitalised names, here including a capitalised first
    word, since a query is short and often starts with the name), every run of 1–3 adjacent
    non-stopwords is a candidate as well ("caroline", "new york", "new", "york"). A candidate
    that names no stored entity costs nothing but an index probe, while a missed name loses the
    entity leg of the search. At most MAX_QUERY_NAMES are returned, explicit entities first.
    """
    mentions, masked = _find(text, query=True)
    names = [mention.normalized for mention in mentions]
    names.extend(_query_ngrams(masked))  # blanked text: no n-grams made of URL or email pieces
    return list(dict.fromkeys(name for name in names if name))[:MAX_QUERY_NAMES]
