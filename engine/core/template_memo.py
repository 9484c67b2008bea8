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

import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

from jinja2 import nodes
from jinja2.runtime import Undefined
from pydantic import BaseModel

from engine.core.bounded import remember

MAX_REMEMBERED = 1024  # texts kept per template; past that the memo starts again
MAX_TEXT = 1_000  # characters of a text worth remembering (messages run 50-300)
MAX_ITEMS = 64  # items of a list read as one value of the key
NAME = "name"
_VALUE, _TRUTH = "value", "truth"
_STEP_ATTR, _STEP_ITEM = "attr", "item"
_TEST_PARENTS = (nodes.And, nodes.Or)  # in a test position, so are their operands

Chain = tuple[str, tuple[tuple[str, Any], ...]]  # (input name, steps)
StepReader = Callable[[Any], Any]  # one step of a chain: `obj` -> `obj.b` or `obj['c']`


@dataclass(frozen=True, slots=True)
class _Read:
    chain: Chain
    mode: str  # _VALUE, or _TRUTH when only the value's truth is used


class Remembered(NamedTuple):
    """A text rendered with markers: whole, and with whitespace collapsed as the pieces
    between its markers, with the input whose name goes in each marker's place."""

    raw: str
    pieces: tuple[str, ...]
    roots: tuple[str, ...]


class Readers(Protocol):
    """How the sandbox reads `obj.name` (one reader per name) and `obj[key]`."""

    def attribute_reader(self, attribute: str) -> StepReader: ...

    def getitem(self, obj: Any, argument: Any) -> Any: ...


class MessageMemo:
    """What one template reads, and the texts it rendered, by key."""

    def __init__(self, reads: tuple[_Read, ...], named: tuple[str, ...], assigned: frozenset[str],
                 readers: Readers):
        self.reads = reads
        self.named = named  # inputs whose `.name` is printed as the marker
        self.assigned = assigned  # names the template sets (never inputs)
        self.markers = {root: _marker() for root in named}
        self._root_of_marker = {marker: root for root, marker in self.markers.items()}
        self._any_marker = re.compile(f"({'|'.join(self.markers.values())})")
        self.texts: dict[tuple[Any, ...], Remembered] = {}
        # Each chain prefix is read once, in `key`'s list of values read: the inputs first,
        # then each step from the value read before it (its index, and the step's reader).
        chains = _prefixes(reads)
        self._inputs = tuple(root for root, steps in chains if not steps)
        index: dict[Chain, int] = {(root, ()): number for number, root in enumerate(self._inputs)}
        self._steps: list[tuple[int, StepReader]] = []
        for root, steps in chains:
            if steps:
                index[(root, steps)] = len(self._inputs) + len(self._steps)
                self._steps.append((index[(root, steps[:-1])], _step_reader(steps[-1], readers)))
        self._truths = tuple(index[read.chain] for read in reads if read.mode == _TRUTH)
        self._values = tuple(index[read.chain] for read in reads if read.mode != _TRUTH)

    def key(self, values: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """The values the template reads, as a key; None when one is not plain."""
        if self.assigned and not self.assigned.isdisjoint(values):
            return None
        for root in self.named:
            if not isinstance(values.get(root), BaseModel):
                return None
        read: list[Any] = []  # loops, not comprehensions: on 3.11 each of those is a call
        for root in self._inputs:
            read.append(values.get(root, _ABSENT))
        for parent, step in self._steps:
            read.append(step(read[parent]))
        parts: list[Any] = []
        for node in self._truths:
            parts.append(bool(read[node]))
        for node in self._values:
            value = read[node]
            kind = type(value)
            if kind is str or kind is int:  # `plain_key`'s first cases, inline
                parts.append(value)
                continue
            if kind is float and value:
                parts.append((kind, value))
                continue
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
        pieces, roots = remembered.pieces, remembered.roots
        size = len(remembered.raw) - len(roots) * _MARKER_SIZE
        if len(self.named) == 1:  # the usual case, one name: `{{ r.name }}`
            name = _one_word_name(values[self.named[0]])
            if name is None:
                return None
            size += len(roots) * len(name)
            return name.join(pieces) if size <= limit else None
        names: dict[str, str] = {}
        for root in self.named:
            name = _one_word_name(values[root])
            if name is None:
                return None
            names[root] = name
        size += sum(len(names[root]) for root in roots)
        text = pieces[0] + "".join(names[root] + piece
                                   for root, piece in zip(roots, pieces[1:], strict=True))
        return text if size <= limit else None

    def remember(self, key: tuple[Any, ...], raw: str) -> Remembered:
        collapsed = " ".join(raw.split())
        split = self._any_marker.split(collapsed) if self.named else [collapsed]
        roots = tuple(self._root_of_marker[marker] for marker in split[1::2])
        return remember(self.texts, key, Remembered(raw, tuple(split[0::2]), roots),
                        MAX_REMEMBERED)


def _one_word_name(named: Any) -> str | None:
    """The name of `named` as jinja2 prints it; None when it is not one word."""
    name = named.name
    name = name if type(name) is str else str(name)
    return name if name.split() == [name] else None


def _marker() -> str:
    """A word no template or value writes, that whitespace collapsing leaves as it is."""
    return f"\x00{secrets.token_hex(8)}\x00"


_MARKER_SIZE = len(_marker())  # every marker's


def _prefixes(reads: tuple[_Read, ...]) -> list[Chain]:
    """Every prefix of the chains read (`r`, `r.gpu`, `r.gpu.count`), each once, each after
    its own prefixes."""
    prefixes: dict[Chain, None] = {}
    for read in reads:
        root, steps = read.chain
        for depth in range(len(steps) + 1):
            prefixes[(root, steps[:depth])] = None
    return list(prefixes)


def _step_reader(step: tuple[str, Any], readers: Readers) -> StepReader:
    kind, name = step
    if kind == _STEP_ATTR:
        return readers.attribute_reader(name)
    getitem = readers.getitem
    return lambda obj: getitem(obj, name)


class _Absent:
    """An input the render was not given (read as undefined)."""


_ABSENT = _Absent()


def plain_key(value: Any) -> Any:
    """A key equal for two values exactly when jinja2 prints and compares them alike; None for
    a value that is not plain. Types are part of it (1, 1.0 and True are equal in Python but
    print apart), floats by their exact bits (0.0 and -0.0), sequences in their order. A text
    and an int (not a bool) are their own key: each equals only values of its own type that
    print the same, and every other key is a tuple."""
    kind = type(value)
    if kind is str or kind is int:
        return value
    if value is None or kind is bool:
        return (kind, value)
    if kind is float:  # equal floats print alike, but for the sign of a zero
        return (kind, value) if value else (kind, value.hex())
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


def memo_for(tree: nodes.Template, readers: Readers) -> MessageMemo | None:
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
    return MessageMemo(kept, named, assigned, readers)


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
