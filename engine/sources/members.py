"""A JSON object's top-level members parsed one at a time, so a large snapshot bundle never has
every section's parse tree in memory at once.

`member_spans` finds where each member's value lies in the text without building it: orjson
parses a value and stops, saying where, at the content after it (its validating pass builds no
Python objects, a tenth of a whole parse). Each value is then parsed by itself when asked for.
The grammar is context-free, so a value parsed alone is the value the whole document holds;
anything that is not plainly one JSON object (a BOM, YAML, a repeated key, an invalid value)
gets no spans, and the caller parses the whole text as before.
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import Any

import orjson

_WS = rb"[ \t\n\r]*"  # JSON's whitespace, exactly
_OPEN = re.compile(_WS + rb"\{" + _WS)
_KEY = re.compile(rb'("(?:[^"\\]|\\.)*")' + _WS + rb":" + _WS, re.DOTALL)
_AFTER = re.compile(_WS + rb"([,}])" + _WS)
_AFTER_VALUE = "unexpected content after document"
# UTF-8 continuation bytes: orjson counts characters, these are the bytes beyond one a character.
_CONTINUATION = bytes(range(0x80, 0xC0))
# orjson copies the text it is given, so a value is first probed within a window of the text
# after it (a header's few bytes need not copy a whole bundle); then within all of it.
_FIRST_WINDOW = 1 << 16

Span = tuple[int, int]


def member_spans(data: bytes, known: Container[str]) -> dict[str, Span] | None:
    """Each member's key and the `(start, end)` of its value in `data`, in the document's order;
    None when `data` is not one JSON object whose members can be parsed one by one, or has a
    key not in `known` (which bounds the probes one document costs)."""
    opened = _OPEN.match(data)
    if opened is None:
        return None
    view, ascii_only = memoryview(data), data.isascii()
    spans: dict[str, Span] = {}
    pos = opened.end()
    if data.startswith(b"}", pos):
        return spans if not data[pos + 1:].strip(b" \t\n\r") else None
    while True:
        member = _KEY.match(data, pos)
        if member is None:
            return None
        key = _loads(member.group(1))
        if not isinstance(key, str) or key in spans or key not in known:
            return None
        start = member.end()
        end = _value_end(data, view, start, start + _FIRST_WINDOW, ascii_only)
        if end is None and start + _FIRST_WINDOW < len(data):
            end = _value_end(data, view, start, len(data), ascii_only)
        if end is None:
            return None
        spans[key] = (start, end)
        after = _AFTER.match(data, end)
        if after is None:
            return None
        pos = after.end()
        if after.group(1) == b"}":
            return spans if pos == len(data) else None


def parse_member(data: bytes, span: Span) -> Any:
    """The value at `span` (from `member_spans`); raises `orjson.JSONDecodeError` as orjson
    would on the whole document."""
    return orjson.loads(memoryview(data)[span[0]:span[1]])


def _loads(text: bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _value_end(data: bytes, view: memoryview, start: int, stop: int, ascii_only: bool
               ) -> int | None:
    """Where the value starting at `start` ends, when it ends before `stop`: orjson reads it
    and stops at the `,` or `}` after it. None when that is not what stops it."""
    try:
        orjson.loads(view[start:stop])
    except orjson.JSONDecodeError as exc:
        if exc.msg != _AFTER_VALUE or exc.pos <= 0:
            return None
        return start + (exc.pos if ascii_only else _byte_offset(data, start, exc.pos))
    return None  # the value ran to the end of the text: no closing brace


def _byte_offset(data: bytes, start: int, characters: int) -> int:
    """The byte offset, from `start`, of the character at index `characters` (UTF-8)."""
    offset, counted = characters, 0
    while True:  # each round adds the continuation bytes of the bytes newly covered
        extra = _continuation_bytes(data[start + counted:start + offset])
        if extra == 0:
            return offset
        counted = offset
        offset += extra


def _continuation_bytes(chunk: bytes) -> int:
    return len(chunk) - len(chunk.translate(None, _CONTINUATION))
