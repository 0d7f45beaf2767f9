"""The model's Markdown, as each platform wants it: Slack mrkdwn, Telegram MarkdownV2, split at a limit.

The Markdown is parsed once (markdown-it, CommonMark plus strikethrough and tables) and the token
stream is rendered by a small per-platform dialect, so every literal character is escaped exactly
where the platform needs it and formatting survives as formatting. Replies are split on the *source*
Markdown, at paragraph, then line, then word boundaries; a split inside a fenced code block closes the
fence and opens it again in the next part, so every part renders on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark").enable(["strikethrough", "table"])


class Dialect(Protocol):
    def escape(self, text: str) -> str: ...
    def code(self, text: str) -> str: ...
    def pre(self, text: str, language: str) -> str: ...
    def bold(self, inner: str) -> str: ...
    def italic(self, inner: str) -> str: ...
    def strike(self, inner: str) -> str: ...
    def link(self, inner: str, plain: str, url: str) -> str: ...
    def quote_prefix(self) -> str: ...
    def rule(self) -> str: ...
    def bullet(self) -> str: ...
    def number(self, n: int) -> str: ...


class SlackDialect:
    """mrkdwn: *bold*, _italic_, ~strike~, `code`, ```pre```, <url|text>; &, < and > are entities."""

    def escape(self, text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def code(self, text: str) -> str:
        return f"`{self.escape(text)}`"

    def pre(self, text: str, language: str) -> str:
        return f"```\n{self.escape(text.rstrip(chr(10)))}\n```"

    def bold(self, inner: str) -> str:
        return f"*{inner}*" if inner.strip() else inner

    def italic(self, inner: str) -> str:
        return f"_{inner}_" if inner.strip() else inner

    def strike(self, inner: str) -> str:
        return f"~{inner}~" if inner.strip() else inner

    def link(self, inner: str, plain: str, url: str) -> str:
        label = self.escape(plain).replace("|", "¦")
        target = url.replace(">", "%3E").replace("|", "%7C").replace(" ", "%20")
        return f"<{target}|{label}>" if label and label != url else f"<{target}>"

    def quote_prefix(self) -> str:
        return "> "

    def rule(self) -> str:
        return "―――"

    def bullet(self) -> str:
        return "• "

    def number(self, n: int) -> str:
        return f"{n}. "


_V2_SPECIAL = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")


class TelegramDialect:
    """Telegram MarkdownV2: every one of _*[]()~`>#+-=|{}.! outside entities is escaped with a backslash;
    inside code only ` and \\ are; inside a link's URL only ) and \\ are."""

    def escape(self, text: str) -> str:
        return _V2_SPECIAL.sub(r"\\\1", text)

    def code(self, text: str) -> str:
        return "`" + _code_escape(text) + "`"

    def pre(self, text: str, language: str) -> str:
        lang = re.sub(r"[^A-Za-z0-9_+\-]", "", language)
        return f"```{lang}\n{_code_escape(text.rstrip(chr(10)))}\n```"

    def bold(self, inner: str) -> str:
        return f"*{inner}*" if inner.strip() else inner

    def italic(self, inner: str) -> str:
        # "__" would read as underline where two italics meet: the empty-entity marker \r separates them.
        return f"_{inner}_\r" if inner.strip() else inner

    def strike(self, inner: str) -> str:
        return f"~{inner}~" if inner.strip() else inner

    def link(self, inner: str, plain: str, url: str) -> str:
        target = url.replace("\\", "\\\\").replace(")", "\\)")
        return f"[{inner}]({target})" if inner else self.escape(url)

    def quote_prefix(self) -> str:
        return ">"

    def rule(self) -> str:
        return self.escape("―――")

    def bullet(self) -> str:
        return "• "

    def number(self, n: int) -> str:
        return self.escape(f"{n}. ")


def _code_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("`", "\\`")


SLACK = SlackDialect()
TELEGRAM = TelegramDialect()


def to_mrkdwn(markdown: str) -> str:
    return render(markdown, SLACK)


def to_markdown_v2(markdown: str) -> str:
    # \r marks where an italic ends (TelegramDialect.italic); it is only needed before another "_".
    return re.sub(r"\r(?!_)", "", render(markdown.replace("\r", ""), TELEGRAM))


class _Renderer:
    def __init__(self, source: str, dialect: Dialect) -> None:
        self.lines = source.splitlines()
        self.d = dialect
        self.blocks: list[str] = []  # finished top-level output, joined by blank lines
        self.lists: list[list[int | str]] = []  # [kind, next number] per open list
        self.quote = 0
        self.item_marker: str | None = None  # marker waiting for the first line of a list item
        self.tight_item = False
        self.list_has_output = False  # the outermost open list has emitted a line

    def emit(self, text: str, *, tight: bool = False) -> None:
        indent = "  " * max(0, len(self.lists) - 1)
        if self.item_marker is not None:
            first, marker = True, self.item_marker
            self.item_marker = None
        else:
            first, marker = False, ""
        out = []
        for n, line in enumerate(text.split("\n")):
            lead = indent + (marker if first and n == 0 else ("  " if self.lists else ""))
            out.append(self.d.quote_prefix() * self.quote + lead + line)
        rendered = "\n".join(out)
        if self.lists:
            tight, self.list_has_output = tight and self.list_has_output, True
        if tight and self.blocks:
            self.blocks[-1] += "\n" + rendered
        else:
            self.blocks.append(rendered)

    def run(self, tokens: Sequence[Token]) -> str:
        i = 0
        heading = False
        while i < len(tokens):
            tok = tokens[i]
            kind = tok.type
            if kind == "heading_open":
                heading = True
            elif kind == "heading_close":
                heading = False
            elif kind == "inline":
                text = self.inline(tok.children or [])
                self.emit(self.d.bold(text) if heading else text, tight=self._joins_previous())
            elif kind in ("bullet_list_open", "ordered_list_open"):
                start = int(tok.attrGet("start") or 1) if kind == "ordered_list_open" else 0
                if not self.lists:
                    self.list_has_output = False
                self.lists.append(["ol" if kind == "ordered_list_open" else "ul", start])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
            elif kind == "list_item_open":
                current = self.lists[-1]
                if current[0] == "ol":
                    number = int(tok.info) if tok.info.isdigit() else int(current[1])
                    current[1] = number + 1
                    self.item_marker = self.d.number(number)
                else:
                    self.item_marker = self.d.bullet()
                self.tight_item = True
            elif kind == "paragraph_open" and not tok.hidden:
                self.tight_item = False
            elif kind == "blockquote_open":
                self.quote += 1
            elif kind == "blockquote_close":
                self.quote -= 1
            elif kind in ("fence", "code_block"):
                self.emit(self.d.pre(tok.content, tok.info.strip().split(" ")[0] if tok.info else ""))
            elif kind == "hr":
                self.emit(self.d.rule())
            elif kind == "html_block":
                self.emit(self.d.escape(tok.content.rstrip("\n")))
            elif kind == "table_open":
                start, end = tok.map or (0, 0)
                self.emit(self.d.pre("\n".join(self.lines[start:end]), ""))
                while tokens[i].type != "table_close":
                    i += 1
            i += 1
        return "\n\n".join(block for block in self.blocks if block.strip())

    def _joins_previous(self) -> bool:
        # Items of a tight list follow each other line by line; everything else is its own paragraph.
        return bool(self.lists) and self.tight_item

    def inline(self, children: Sequence[Token]) -> str:
        out: list[str] = []
        plain: list[str] = []
        stack: list[tuple[Token, list[str], list[str]]] = []
        for tok in children:
            kind = tok.type
            if kind == "text":
                out.append(self.d.escape(tok.content))
                plain.append(tok.content)
            elif kind in ("softbreak", "hardbreak"):
                out.append("\n")
                plain.append("\n")
            elif kind == "code_inline":
                out.append(self.d.code(tok.content))
                plain.append(tok.content)
            elif kind in ("strong_open", "em_open", "s_open", "link_open"):
                stack.append((tok, out, plain))
                out, plain = [], []
            elif kind in ("strong_close", "em_close", "s_close", "link_close") and stack:
                opener, parent, parent_plain = stack.pop()
                inner, inner_plain = "".join(out), "".join(plain)
                if kind == "strong_close":
                    piece = self.d.bold(inner)
                elif kind == "em_close":
                    piece = self.d.italic(inner)
                elif kind == "s_close":
                    piece = self.d.strike(inner)
                else:
                    piece = self.d.link(inner, inner_plain, str(opener.attrGet("href") or ""))
                out, plain = parent, parent_plain
                out.append(piece)
                plain.append(inner_plain)
            elif kind == "image":
                alt = tok.content or "image"
                out.append(self.d.link(self.d.escape(alt), alt, str(tok.attrGet("src") or "")))
                plain.append(alt)
            else:  # html_inline and anything unknown: shown literally
                out.append(self.d.escape(tok.content))
                plain.append(tok.content)
        return "".join(out)


def render(markdown: str, dialect: Dialect) -> str:
    return _Renderer(markdown, dialect).run(_PARSER.parse(markdown))


# ------------------------------------------------------------------------------------------ splitting

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
Measure = Callable[[str], int]


def utf16_len(text: str) -> int:
    """Telegram counts message length in UTF-16 code units (an emoji is two)."""
    return len(text.encode("utf-16-le")) // 2


def split_markdown(markdown: str, limit: int, measure: Measure = len) -> list[str]:
    """Parts of at most `limit` (as `measure` counts), in order, none empty: paragraphs packed together,
    a paragraph too long broken at lines, a line too long at words (else anywhere). A fenced code block
    broken in two is closed at the end of one part and opened again at the start of the next."""
    parts: list[str] = []
    current = ""
    for block in _blocks(markdown.strip("\n")):
        joined = f"{current}\n\n{block}" if current else block
        if measure(joined) <= limit:
            current = joined
            continue
        if current:
            parts.append(current)
            current = ""
        if measure(block) <= limit:
            current = block
            continue
        pieces = _split_block(block, limit, measure)
        parts.extend(pieces[:-1])
        current = pieces[-1]
    if current.strip():
        parts.append(current)
    return [part for part in parts if part.strip()]


def _blocks(text: str) -> list[str]:
    """Paragraphs (separated by blank lines), with a fenced code block kept whole even across blank lines."""
    blocks: list[str] = []
    lines: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
        elif fence is not None and match and match.group(1).startswith(fence):
            fence = None
        if fence is None and not line.strip() and not match:
            if lines:
                blocks.append("\n".join(lines))
            lines = []
            continue
        lines.append(line)
    if lines:
        blocks.append("\n".join(lines))
    return blocks


def _split_block(block: str, limit: int, measure: Measure) -> list[str]:
    lines = block.split("\n")
    match = _FENCE.match(lines[0])
    if match is None:
        return _pack_lines(lines, limit, measure, "", "")
    opener = lines[0]
    closer = match.group(1)
    body = lines[1:]
    if body and _FENCE.match(body[-1]):
        body = body[:-1]
    return _pack_lines(body, limit, measure, opener + "\n", "\n" + closer)


def _pack_lines(lines: list[str], limit: int, measure: Measure, head: str, tail: str) -> list[str]:
    room = limit - measure(head) - measure(tail)
    if room < 1:
        raise ValueError(f"limit {limit} leaves no room for text")
    pieces: list[str] = []
    current: str | None = None
    for line in lines:
        while True:
            joined = line if current is None else f"{current}\n{line}"
            if measure(joined) <= room:
                current = joined
                break
            if current is not None:
                pieces.append(current)
                current = None
                continue
            cut, line = _cut(line, room, measure)
            pieces.append(cut)
            if not line:
                break
    if current is not None:
        pieces.append(current)
    return [head + piece.rstrip("\n") + tail for piece in pieces if piece.strip()]


def _cut(line: str, room: int, measure: Measure) -> tuple[str, str]:
    """The longest head of `line` within `room`, ended at a space when one is in its second half."""
    low, high = 1, len(line)
    while low < high:  # the longest prefix that fits
        mid = (low + high + 1) // 2
        if measure(line[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    end = low
    space = line.rfind(" ", 0, end + 1)
    if space > end // 2:
        return line[:space], line[space + 1 :]
    return line[:end], line[end:]
