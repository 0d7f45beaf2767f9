"""The offline provider's extraction: rule-based, not a model.

With no language model configured, extraction (and consolidation, which reuses it) still has to
produce facts, so a handful of first-person statements are recognised with patterns. The output is
an `ExtractedFacts`, exactly what a model's parsed answer gives, so everything downstream (mapping,
storing, dedup) runs the same way for both.

Whose facts they are: in a conversation of one person (engram's own chat, a one-person import, messages
without names) every fact is the user's: "User is allergic to peanut" under `user/allergy/peanut`. When
several named people speak (`name_speakers`, decided per session by speakers.several_speakers), a fact from
a named speaker's message names them instead, in the value and in the key, so two people never share or
supersede each other's key:

- the value opens with the name: "User …" becomes "Caroline …", "User's …" "Caroline's …", and a value
  that opens with its verb ("Likes hiking", "Plans to …") gets the name before it ("Caroline likes hiking");
- the key moves under `person/<name>/`, where `<name>` is the speaker's name as a key segment (at most
  SPEAKER_KEY_CHARS characters), after dropping a leading `user/`: `user/allergy/peanut` becomes
  `person/caroline/allergy/peanut`, `pet/luna` `person/caroline/pet/luna`, `hiking` `person/caroline/hiking`;
- requests about how to answer (styles) are not read: between people they are said to each other, not to
  the assistant.

A user message without a name, in such a conversation, is still the user's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from shared.memory.keys import MemoryRejected, normalize_key, sanitize
from shared.pipeline.extraction import TranscriptMessage, is_steering, split_sentences
from shared.pipeline.extraction_parsing import CATEGORIES, MAX_DERIVED_KEY_WORDS, ExtractedFacts, derive_key
from shared.pipeline.offline_patterns import (
    APOSTROPHES,
    CHATTY_VERBS,
    CLAUSE_END,
    CODE_FENCE,
    CONNECTORS,
    EMAIL,
    JOBS,
    LANGUAGES,
    NOT_A_NAME,
    NOT_CURRENT_JOB,
    P_ALLERGIC,
    P_ALLERGY,
    P_CALL_ME,
    P_DECIDED,
    P_DIET,
    P_DISLIKE,
    P_FAVOURITE,
    P_FLUENT,
    P_FROM,
    P_FROM_NOW_ON,
    P_GOING_TO,
    P_HAVE_KIDS,
    P_IM_A,
    P_LEARNING,
    P_LIKE,
    P_LIVE,
    P_MOVED,
    P_MY_EMAIL,
    P_MY_RELATIVE_NAMED,
    P_NAME,
    P_NO_EAT,
    P_PET,
    P_PLAN,
    P_PLEASE,
    P_PLEASE_ALWAYS,
    P_PREFER,
    P_RATHER,
    P_RELATION,
    P_SPEAK,
    P_WORK_AS,
    P_WORK_AT,
    PETS,
    QUOTES,
    TITLES,
    TRAILING,
    TRAILING_FROM_NOW_ON,
    VAGUE_FIRST,
    VAGUE_PREFIXES,
)

# Principles, in order:
# - user messages only (never assistant, tool, system or steering text);
# - a pattern must open the sentence (after an optional "hi,", "btw", "also", ...), so reported
#   speech, conditionals and questions about the user ("do you know where I live in…") stay out;
# - questions never produce facts: "I like that idea?" is silent;
# - names, places and organisations must be capitalised ("call me later" is not a name);
# - vague objects ("I like that", "I love it", "I like the idea") are dropped;
# - quoted lines and fenced code are skipped: they are someone else's words or data.
# A missed fact is cheap (a model provider will find it); a wrong one is shown in every prompt.


def _clause(rest: str, max_words: int) -> str | None:
    """The object of a statement: up to the first clause break, trailing punctuation stripped."""
    text = CLAUSE_END.sub("", rest).strip().rstrip(TRAILING).strip()
    text = " ".join(text.split())
    words = text.split()
    if not words or len(words) > max_words:
        return None
    return text


def _is_vague(phrase: str) -> bool:
    lowered = phrase.lower()
    first = lowered.split()[0]
    return first in VAGUE_FIRST or any(lowered == p or lowered.startswith(p + " ") for p in VAGUE_PREFIXES)


def _third_person(phrase: str) -> str:
    """ "my coffee black" → "their coffee black": the stored fact is about the user, not the reader."""
    swaps = {"my": "their", "mine": "theirs", "myself": "themself", "me": "them"}
    return re.sub(r"\b(my|mine|myself|me)\b", lambda m: swaps[m.group(1).lower()], phrase, flags=re.IGNORECASE)


def _proper_noun(rest: str, max_words: int, *, allow_digits: bool = False) -> str | None:
    """The capitalised name at the start of `rest` ("Ana Lopez", "Bank of America"), or None."""
    parts: list[str] = []
    for raw in rest.split():
        if raw in TITLES:
            parts.append(raw)
            continue
        word = raw.rstrip(TRAILING)
        ended = word != raw  # punctuation after a word ends the name
        first = word[:1]
        is_name = bool(first) and (first.isupper() or (allow_digits and first.isdigit()))
        is_name = is_name and re.fullmatch(r"[\w&'.-]+", word) is not None and word not in NOT_A_NAME
        # A lowercase connector ("Bank of America") continues a name but never starts one.
        if is_name or (parts and word.lower() in CONNECTORS and not ended):
            parts.append(word)
        else:
            break
        if ended:
            break
    while parts and (parts[-1].lower() in CONNECTORS or parts[-1] in TITLES):
        parts.pop()
    if not parts or len(parts) > max_words:
        return None
    return " ".join(parts)


def _place(rest: str) -> str | None:
    """A capitalised place, with an optional ", Region" ("Berlin, Germany")."""
    place = _proper_noun(rest, 4)
    if place is None:
        return None
    tail = rest[len(place) :]
    region_match = re.match(r"\s*,\s*(.+)", tail, re.DOTALL)
    if region_match:
        region = _proper_noun(region_match.group(1), 3)
        if region is not None:
            return f"{place}, {region}"
    return place


def _occupation(rest: str) -> tuple[str | None, str | None]:
    """(job, employer) from "software engineer at Acme" or (None, None) when the job is not a known one."""
    words: list[str] = []
    employer_text: str | None = None
    raw_words = rest.split()
    for index, raw in enumerate(raw_words):
        word = raw.rstrip(TRAILING)
        lowered = word.lower()
        if lowered in {"at", "for"}:
            employer_text = " ".join(raw_words[index + 1 :])
            break
        if lowered in {"in", "with", "and", "but", "who", "that", "from", "on", "by", "so"}:
            break
        words.append(word)
        if word != raw:
            break
    if not 1 <= len(words) <= 4 or words[-1].lower() not in JOBS:
        return None, None
    if any(w.lower().strip("-") in NOT_CURRENT_JOB or not re.fullmatch(r"[A-Za-z-]+", w) for w in words):
        return None, None
    employer = _proper_noun(employer_text, 5, allow_digits=True) if employer_text else None
    return " ".join(words), employer


def _article(phrase: str) -> str:
    return "an" if phrase[:1].lower() in "aeiou" else "a"


def _slug(text: str, max_words: int = MAX_DERIVED_KEY_WORDS) -> str:
    return derive_key(text, max_words)


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t" + QUOTES + ")").endswith("?")


# The longest speaker's name a key carries: "person/<name>/" plus the longest key the rules make stays
# within MAX_KEY_CHARS.
SPEAKER_KEY_CHARS = 32


@dataclass(frozen=True)
class _Speaker:
    """The named person a fact is about, in a conversation of several people."""

    name: str  # as shown in the transcript
    segment: str  # as a key segment

    @classmethod
    def of(cls, message: TranscriptMessage) -> _Speaker | None:
        name = message.speaker_name
        segment = derive_key(name or "")[:SPEAKER_KEY_CHARS].strip("-")
        return cls(name, segment) if name and segment else None

    def key(self, key: str) -> str:
        return f"person/{self.segment}/{key.removeprefix('user/')}"

    def value(self, value: str) -> str:
        if value.startswith(_USERS):
            return f"{self.name}'s {value.removeprefix(_USERS)}"
        if value.startswith("User "):
            return f"{self.name} {value.removeprefix('User ')}"
        if value.startswith(_MENTIONED_BY_USER):
            return f"{_MENTIONED_BY} {self.name}{value.removeprefix(_MENTIONED_BY_USER)}"
        return f"{self.name} {value[:1].lower()}{value[1:]}"  # every other value opens with its verb


_USERS = "User's "
_MENTIONED_BY = "Email address mentioned by"
_MENTIONED_BY_USER = f"{_MENTIONED_BY} the user"


class _Collector:
    """Facts per category; a later statement with the same key replaces the earlier value. Facts are the
    user's, or `speaker`'s while one is set (see the module docstring)."""

    def __init__(self) -> None:
        self.found: dict[str, dict[str, str]] = {name: {} for name in CATEGORIES}
        self.speaker: _Speaker | None = None

    def _scoped(self, key: str, value: str) -> tuple[str, str]:
        return (key, value) if self.speaker is None else (self.speaker.key(key), self.speaker.value(value))

    def add(self, category: str, key: str, value: str) -> None:
        if category == "styles" and self.speaker is not None:
            return
        try:
            clean_key, clean_value = sanitize(*self._scoped(key, value))
        except MemoryRejected:
            return
        self.found[category][clean_key] = clean_value

    def drop(self, category: str, key: str) -> None:
        self.found[category].pop(normalize_key(self._scoped(key, "-")[0]), None)

    def facts(self) -> ExtractedFacts:
        return ExtractedFacts(**{name: list(items.items()) for name, items in self.found.items()})


# "I like cats and I hate dogs", "I'm Alexandra but call me Ali": each first-person clause is read as its own
# statement.
_CLAUSE_SPLIT = re.compile(r";|\b(?:and|but)\s+(?=I\b|I'|[Mm]y\b|(?:you can |please )?call me\b)")


def _user_sentences(messages: Iterable[TranscriptMessage]) -> Iterator[tuple[TranscriptMessage, str]]:
    for message in messages:
        if message.role != "user" or is_steering(message.content):
            continue
        text = CODE_FENCE.sub("\n", message.content.translate(APOSTROPHES))
        lines = [line for line in text.splitlines() if not line.lstrip().startswith(">")]
        for sentence in split_sentences("\n".join(lines)):
            yield message, sentence


def offline_extract(messages: Sequence[TranscriptMessage], *, name_speakers: bool = False) -> ExtractedFacts:
    """Rule-based extraction over the user's own messages (the offline provider; not a model).

    Deterministic and conservative; see the comment block above for the rules. Facts come out
    already sanitised (normalised keys); anything the sanitiser refuses is dropped. `name_speakers`:
    the conversation is between several named people, so each fact names its speaker (module docstring).
    """
    out = _Collector()
    for message, sentence in _user_sentences(messages):
        out.speaker = _Speaker.of(message) if name_speakers else None
        for email in EMAIL.findall(sentence):
            out.add("entities", f"email/{email.lower()}", f"Email address mentioned by the user: {email}")
        if _is_question(sentence) or sentence[:1] in QUOTES:
            continue
        for clause in _CLAUSE_SPLIT.split(sentence):
            clause = clause.strip().rstrip(",").strip()
            if clause:
                _extract_sentence(clause, out)
    return out.facts()


def _extract_sentence(sentence: str, out: _Collector) -> None:
    # Each sentence yields at most the facts of the first matching statement family, except that
    # an occupation may also name an employer.
    if m := P_MY_EMAIL.match(sentence):
        email_match = EMAIL.fullmatch(m.group("rest").rstrip(TRAILING))
        if email_match:
            out.drop("entities", f"email/{email_match.group(0).lower()}")
            out.add("entities", "user/email", f"User's email address is {email_match.group(0)}")
        return
    if m := P_NAME.match(sentence):
        if name := _proper_noun(m.group("rest"), 3):
            out.add("entities", "user/name", f"User's name is {name}")
        return
    if m := P_CALL_ME.match(sentence):
        if name := _proper_noun(m.group("rest"), 3):
            out.add("preferences", "preferred-name", f"Prefers to be called {name}")
        return
    for pattern, key, template in (
        (P_LIVE, "user/location", "User lives in {}"),
        (P_MOVED, "user/location", "User moved to {}"),
        (P_FROM, "user/hometown", "User is from {}"),
    ):
        if m := pattern.match(sentence):
            if place := _place(m.group("rest")):
                out.add("entities", key, template.format(place))
            return
    if m := P_WORK_AT.match(sentence):
        if org := _proper_noun(m.group("rest"), 5, allow_digits=True):
            out.add("entities", "user/employer", f"User works at {org}")
        return
    if (m := P_WORK_AS.match(sentence)) or (m := P_IM_A.match(sentence)):
        job, employer = _occupation(m.group("rest"))
        if job:
            out.add("entities", "user/occupation", f"User works as {_article(job)} {job}")
            if employer:
                out.add("entities", "user/employer", f"User works at {employer}")
        return
    if m := P_RATHER.match(sentence):
        phrase = _clause(m.group("rest"), 12)
        pair = re.match(r"(?P<a>.+?)\s+than\s+(?P<b>.+)$", phrase or "", re.IGNORECASE)
        if pair and not _is_vague(pair.group("a")) and not _is_vague(pair.group("b")):
            _add_pair(out, pair.group("a"), pair.group("b"), "Would rather {} than {}")
        return
    if m := P_PREFER.match(sentence):
        _prefer(out, m.group("rest"))
        return
    if m := P_DISLIKE.match(sentence):
        if (phrase := _clause(m.group("rest"), 8)) and not _is_vague(phrase):
            out.add("preferences", _slug(phrase), f"Dislikes {_third_person(phrase)}")
        return
    if m := P_LIKE.match(sentence):
        if (phrase := _clause(m.group("rest"), 8)) and not _is_vague(phrase):
            out.add("preferences", _slug(phrase), f"Likes {_third_person(phrase)}")
        return
    if _personal_fact(sentence, out):
        return
    if m := P_RELATION.match(sentence):
        relation = (m.group("adj") or "") + m.group("rel").lower()
        if name := _proper_noun(m.group("rest"), 3):
            kind = "pet" if m.group("rel").lower() in PETS else "person"
            out.add("entities", f"{kind}/{_slug(name)}", f"User's {relation} is {name}")
        return
    if m := P_DECIDED.match(sentence):
        if phrase := _clause(m.group("rest"), 15):
            prep = m.group("prep").lower()
            out.add("decisions", _slug(phrase), f"Decided {prep} {_third_person(phrase)}")
        return
    if m := P_GOING_TO.match(sentence):
        phrase = _clause(m.group("rest"), 15)
        if not phrase or len(phrase.split()) < 2:
            return
        first = phrase.split()[0]
        if first[0].isupper() and first not in NOT_A_NAME:  # "I'm going to Lisbon in May"
            out.add("decisions", _slug(f"go to {phrase}"), f"Plans to go to {phrase}")
        elif first.lower() not in CHATTY_VERBS | {"the", "a", "an", "my", "your", "you"}:
            out.add("decisions", _slug(phrase), f"Plans to {_third_person(phrase)}")
        return
    _extract_style(sentence, out)


def _languages(rest: str) -> list[str]:
    """The language names at the start of `rest` ("French and a little Spanish" → French, Spanish)."""
    found = []
    for raw in re.split(r",|\band\b|\bor\b|\bas well as\b", CLAUSE_END.sub("", rest) if "," not in rest else rest):
        words = [w.rstrip(TRAILING) for w in raw.split()]
        names = [w for w in words if w in LANGUAGES]
        if not names:
            break
        found.extend(names)
    return found


def _personal_fact(sentence: str, out: _Collector) -> bool:
    """Pets, allergies, diet, favourites, languages, family and plans; True when the sentence was one."""
    if m := P_PET.match(sentence):
        animal = m.group("animal").lower()
        count = m.group("count").lower()
        name = _proper_noun(m.group("name"), 3) if m.group("name") else None
        if name:
            out.add("entities", f"pet/{_slug(name)}", f"User has {_article(animal)} {animal} named {name}")
        else:
            out.add("entities", f"pet/{_slug(animal)}", f"User has {count} {animal}")
        return True
    if (m := P_ALLERGIC.match(sentence)) or (m := P_ALLERGY.match(sentence)):
        if (phrase := _clause(m.group("rest"), 6)) and not _is_vague(phrase):
            out.add("entities", f"user/allergy/{_slug(phrase, 3)}", f"User is allergic to {_third_person(phrase)}")
        return True
    if m := P_DIET.match(sentence):
        out.add("preferences", "diet", f"User is {m.group('diet').lower()}")
        return True
    if m := P_NO_EAT.match(sentence):
        if (phrase := _clause(m.group("rest"), 5)) and not _is_vague(phrase):
            verb = m.group("verb").lower()
            out.add("preferences", f"no-{verb}/{_slug(phrase, 3)}", f"Does not {verb} {_third_person(phrase)}")
        return True
    if m := P_FAVOURITE.match(sentence):
        what = " ".join(m.group("what").split())
        if (phrase := _clause(m.group("rest"), 8)) and not _is_vague(phrase):
            out.add("preferences", f"favourite-{_slug(what, 3)}", f"User's favourite {what} is {_third_person(phrase)}")
        return True
    if (m := P_SPEAK.match(sentence)) or (m := P_FLUENT.match(sentence)):
        languages = _languages(m.group("rest"))
        for language in languages:
            out.add("entities", f"user/language/{_slug(language)}", f"User speaks {language}")
        return bool(languages)
    if m := P_LEARNING.match(sentence):
        languages = _languages(m.group("rest"))
        for language in languages:
            out.add("entities", f"user/learning/{_slug(language)}", f"User is learning {language}")
        if not languages and (phrase := _clause(m.group("rest"), 6)) and not _is_vague(phrase):
            out.add("entities", f"user/learning/{_slug(phrase, 4)}", f"User is learning {_third_person(phrase)}")
        return True
    if m := P_HAVE_KIDS.match(sentence):
        who = m.group("who").lower()
        out.add("entities", f"family/{_slug(who)}", f"User has {m.group('count').lower()} {who}")
        return True
    if (m := P_MY_RELATIVE_NAMED.match(sentence)) and not P_RELATION.match(sentence):
        relation = (m.group("adj") or "") + m.group("rel").lower()
        if name := _proper_noun(m.group("rest"), 3):
            kind = "pet" if m.group("rel").lower() in PETS else "person"
            out.add("entities", f"{kind}/{_slug(name)}", f"User's {relation} is {name}")
            return True
        return False
    if m := P_PLAN.match(sentence):
        phrase = _clause(m.group("rest") or m.group("rest2"), 15)
        if phrase and len(phrase.split()) >= 2 and phrase.split()[0].lower() not in CHATTY_VERBS:
            out.add("decisions", _slug(phrase), f"Plans to {_third_person(phrase)}")
        return True
    return False


def _prefer(out: _Collector, rest: str) -> None:
    phrase = _clause(rest, 12)
    if phrase is None or _is_vague(phrase):
        return
    pair = re.match(r"(?P<a>.+?)\s+(?:over|rather than|instead of)\s+(?P<b>.+)$", phrase, re.IGNORECASE)
    if pair is None:
        # "to" compares only short noun phrases: "tea to coffee", not "going to the gym" or
        # "walking to work" (a gerund before "to" is an activity, not one side of a comparison).
        pair = re.match(r"(?P<a>.+?)\s+to\s+(?P<b>.+)$", phrase, re.IGNORECASE)
        if pair and (
            len(pair.group("a").split()) > 3
            or len(pair.group("b").split()) > 3
            or pair.group("a").lower().endswith("ing")
            or pair.group("a").lower() in {"not", "to"}
        ):
            pair = None
    if pair is not None:
        if not _is_vague(pair.group("b")):
            _add_pair(out, pair.group("a"), pair.group("b"), "Prefers {} over {}")
        return
    out.add("preferences", _slug(phrase), f"Prefers {_third_person(phrase)}")


def _add_pair(out: _Collector, first: str, second: str, template: str) -> None:
    # The key names both sides in sorted order, so "tea over coffee" later replaced by
    # "coffee over tea" supersedes the old preference instead of contradicting it.
    key = "-vs-".join(sorted((_slug(first, 4), _slug(second, 4))))
    out.add("preferences", key, template.format(_third_person(first), _third_person(second)))


def _extract_style(sentence: str, out: _Collector) -> None:
    if m := P_PLEASE_ALWAYS.match(sentence):
        if phrase := _clause(m.group("rest"), 15):
            adverb = m.group("adv").lower()
            out.add("styles", _slug(f"{adverb} {phrase}"), f"Asked the assistant to {adverb} {phrase}")
        return
    m = P_FROM_NOW_ON.match(sentence)
    if m is None and (suffix := TRAILING_FROM_NOW_ON.search(sentence)) is not None:
        # "Please reply in French from now on": the suffix is cut first, then the request is read.
        m = P_PLEASE.match(sentence[: suffix.start()].rstrip().rstrip(",").rstrip())
    if m is None:
        return
    phrase = _clause(m.group("rest"), 15)
    # "From now on I'll …" is news about the user, not a request about how to talk to them.
    if phrase and phrase.split()[0].lower() not in {"i", "i'll", "i'm", "we", "we'll", "he", "she", "they", "it", "my"}:
        out.add("styles", _slug(phrase), f"Asked the assistant, from now on: {phrase}")
