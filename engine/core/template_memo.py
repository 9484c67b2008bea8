"""Remembered messages: a template rendered once per distinct set of the values it reads.

A policy's message reads a few values (`r.gpu.model`, `details.schedule`, `cost`), and across
an estate most findings of a policy read the same ones; only the resource's name differs. So a
template is rendered once per key (the values it reads) with a marker in place of the name, and
each finding with that key gets the remembered text with its own name put in.

Whether a template can be remembered is decided from its syntax tree when it compiles, and per
render from the values (`MessageMemo.key`):

- no loops and no calls (those carry the render budget, and could read anything);
- every input (`r`, `details`, ...) is read through a chain of attributes and constant keys
  (`r.gpu.count`, `details['x']`), never as a whole, and no `set` reuses an input's name;
- each chain's value, as jinja2 reads it, is a plain value (text, number, enum, None, or a list,
  tuple or frozenset of those; its truth alone where only its truth is used: `if r.gpu`);
- the resource's name is only printed as it is (`{{ r.name }}`): then it is the marker.

A template the rules refuse, or a render whose values are not plain, is rendered as before.
A render that fails, or a text longer than `MAX_TEXT`, is never remembered; a template keeps at
most `MAX_REMEMBERED` texts, and a list of more than `MAX_ITEMS` values is not keyed.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from jinja2 import nodes
from jinja2.runtime import Undefined
from pydantic import BaseModel

MAX_REMEMBERED = 1024  # texts kept per template; past that the memo starts again
MAX_TEXT = 1_000  # characters of a text worth remembering (messages run 50-300)
MAX_ITEMS = 64  # items of a list read as one value of the key
NAME = "name"
_VALUE, _TRUTH = "value", "truth"
_STEP_ATTR, _STEP_ITEM = "attr", "item"
_TEST_PARENTS = (nodes.And, nodes.Or)  # in a test position, so are their operands

Chain = tuple[str, tuple[tuple[str, Any], ...]]  # (input name, steps)
Reader = Callable[[Any, Any], Any]  # the environment's getattr / getitem


@dataclass(frozen=True, slots=True)
class _Read:
    chain: Chain
    mode: str  # _VALUE, or _TRUTH when only the value's truth is used


class Remembered(NamedTuple):
    """A text rendered with markers: whole, whitespace collapsed, and how often each marker
    appears in it."""

    raw: str
    collapsed: str
    counts: tuple[int, ...]


class MessageMemo:
    """What one template reads, and the texts it rendered, by key."""

    def __init__(self, reads: tuple[_Read, ...], named: tuple[str, ...], assigned: frozenset[str]):
        self.reads = reads
        self.named = named  # inputs whose `.name` is printed as the marker
        self.assigned = assigned  # names the template sets (never inputs)
        self.markers = {root: f"\x00{secrets.token_hex(8)}\x00" for root in named}
        self.texts: dict[tuple[Any, ...], Remembered] = {}
        # Each chain prefix read once: (parent node or -1 for an input, input name, whether
        # the step is an attribute, the step); each read: (its node, whether truth alone).
        self._nodes: list[tuple[int, str, bool, Any]] = []
        self._parts: list[tuple[int, bool]] = []
        index: dict[tuple[str, tuple[tuple[str, Any], ...]], int] = {}
        for read in reads:
            root, steps = read.chain
            node = -1
            for depth in range(len(steps) + 1):
                prefix = (root, steps[:depth])
                if prefix not in index:
                    kind, step = steps[depth - 1] if depth else (_STEP_ATTR, None)
                    index[prefix] = len(self._nodes)
                    self._nodes.append((node, root, kind == _STEP_ATTR, step))
                node = index[prefix]
            self._parts.append((node, read.mode == _TRUTH))

    def key(self, values: Mapping[str, Any], getattr_: Reader,
            getitem: Reader) -> tuple[Any, ...] | None:
        """The values the template reads, as a key; None when one is not plain."""
        if self.assigned and not self.assigned.isdisjoint(values):
            return None
        for root in self.named:
            if not isinstance(values.get(root), BaseModel):
                return None
        read: list[Any] = []
        for parent, root, is_attr, step in self._nodes:
            if parent < 0:
                read.append(values.get(root, _ABSENT))
            elif is_attr:
                read.append(getattr_(read[parent], step))
            else:
                read.append(getitem(read[parent], step))
        parts: list[Any] = []
        for node, truth in self._parts:
            value = read[node]
            kind = type(value)
            if truth:
                part: Any = bool(value)
            elif kind is str or kind is int or kind is bool:  # `plain_key`'s first case, inline
                part = (kind, value)
            else:
                part = plain_key(value)
                if part is None:
                    return None
            parts.append(part)
        return tuple(parts)

    def marked(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The values with each named input's name replaced by its marker."""
        marked = dict(values)
        for root in self.named:
            marked[root] = values[root].model_copy(update={NAME: self.markers[root]})
        return marked

    def named_text(self, text: str, values: Mapping[str, Any]) -> str:
        for root in self.named:
            text = text.replace(self.markers[root], str(values[root].name))
        return text

    def collapsed_text(self, remembered: Remembered, values: Mapping[str, Any],
                       limit: int) -> str | None:
        """The collapsed text with the names put in, when that is what collapsing the named
        text gives: each name one word (no whitespace, not empty), so it changes no word
        boundary, and the named text within `limit` (not cut). None otherwise."""
        text, size = remembered.collapsed, len(remembered.raw)
        for root, count in zip(self.named, remembered.counts, strict=True):
            name = str(values[root].name)
            words = name.split()
            if len(words) != 1 or words[0] != name:
                return None
            marker = self.markers[root]
            size += count * (len(name) - len(marker))
            text = text.replace(marker, name)
        return text if size <= limit else None

    def remember(self, key: tuple[Any, ...], raw: str) -> Remembered:
        if len(self.texts) >= MAX_REMEMBERED:
            self.texts.clear()
        counts = tuple(raw.count(self.markers[root]) for root in self.named)
        remembered = self.texts[key] = Remembered(raw, " ".join(raw.split()), counts)
        return remembered


class _Absent:
    """An input the render was not given (read as undefined)."""


_ABSENT = _Absent()


def plain_key(value: Any) -> Any:
    """A key equal for two values exactly when jinja2 prints and compares them alike; None for
    a value that is not plain. Types are part of it (1, 1.0 and True are equal in Python but
    print apart), floats by their exact bits (0.0 and -0.0), sequences in their order."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is bool:
        return (kind, value)
    if kind is float:
        return (kind, value.hex())
    if isinstance(value, Enum):
        return (kind, value)
    if kind is list or kind is tuple or kind is frozenset:
        if len(value) > MAX_ITEMS:
            return None
        for item in value:
            if type(item) is not str:
                break
        else:  # only texts (tag keys, unknown paths): the texts themselves, in their order
            return (kind, str, tuple(value))
        items = tuple(plain_key(item) for item in value)
        return None if any(item is None for item in items) else (kind, items)
    if isinstance(value, Undefined) or value is _ABSENT:
        return (Undefined,)
    return None


# ---------------------------------------------------------------------------- at compile


def memo_for(tree: nodes.Template) -> MessageMemo | None:
    """The memo of a template, or None when the rules above refuse it."""
    if any(True for _ in tree.find_all((nodes.For, nodes.Call, nodes.Macro))):
        return None
    assigned = frozenset(node.name for node in tree.find_all(nodes.Name)
                         if node.ctx in ("store", "param"))
    reads: dict[_Read, None] = {}
    for child in tree.body:
        _collect(child, test=False, printed=False, reads=reads, assigned=assigned)
    named = _printed_names(reads)
    if named is None:
        return None
    kept = tuple(read for read in reads if read.mode != NAME)
    return MessageMemo(kept, named, assigned)


def _printed_names(reads: dict[_Read, None]) -> tuple[str, ...] | None:
    """The inputs whose name is only ever printed as it is; None when a name printed as it is
    is also read another way (the marker would leak into that reading)."""
    printed = {read.chain[0] for read in reads if read.mode == NAME}
    for read in reads:
        root, steps = read.chain
        if read.mode != NAME and root in printed and steps[:1] in ((_name_attr,), (_name_item,)):
            return None
    return tuple(sorted(printed))


_name_attr = (_STEP_ATTR, NAME)
_name_item = (_STEP_ITEM, NAME)


def _chain(node: nodes.Node) -> Chain | None:
    """`a.b['c']` as (a, ((attr, b), (item, c))); None when it is not such a chain."""
    steps: list[tuple[str, Any]] = []
    while True:
        if isinstance(node, nodes.Getattr):
            steps.append((_STEP_ATTR, node.attr))
            node = node.node
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) \
                and isinstance(node.arg.value, str | int):
            steps.append((_STEP_ITEM, node.arg.value))
            node = node.node
        elif isinstance(node, nodes.Name):
            return node.name, tuple(reversed(steps))
        else:
            return None


def _collect(node: nodes.Node, *, test: bool, printed: bool, reads: dict[_Read, None],
             assigned: frozenset[str]) -> None:
    """Record the chains `node` reads (each whole, with how its value is used)."""
    chain = _chain(node)
    if chain is not None:
        root, steps = chain
        if root in assigned:
            return  # a name the template set: made from what it read
        mode = _TRUTH if test else _VALUE
        if printed and steps in (((_STEP_ATTR, NAME),), ((_STEP_ITEM, NAME),)):
            mode = NAME
        reads[_Read(chain, mode)] = None
        return
    if isinstance(node, nodes.Getattr | nodes.Getitem):
        # a reading of something computed (`(a or b).c`, `d[x]`): the base is read whole
        _collect(node.node, test=False, printed=False, reads=reads, assigned=assigned)
        if isinstance(node, nodes.Getitem):
            _collect(node.arg, test=False, printed=False, reads=reads, assigned=assigned)
        return
    for field, child in _children(node):
        _collect(child, test=_in_test(node, field, test), printed=isinstance(node, nodes.Output),
                 reads=reads, assigned=assigned)


def _children(node: nodes.Node) -> list[tuple[str, nodes.Node]]:
    found: list[tuple[str, nodes.Node]] = []
    for field in node.fields:
        value = getattr(node, field, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, nodes.Node):
                found.append((field, item))
    return found


def _in_test(parent: nodes.Node, field: str, test: bool) -> bool:
    """Whether a child in `field` of `parent` is used only for its truth."""
    if isinstance(parent, nodes.If | nodes.CondExpr) and field == "test":
        return True
    if isinstance(parent, nodes.Not):
        return True
    return test and isinstance(parent, _TEST_PARENTS)
