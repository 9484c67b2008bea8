"""YAML loading that remembers where each mapping and list came from, for `file:line` errors.

Bounded, since policy files and snapshots are hostile input (each limit an `InputError` naming
the file and line):

- **Nesting** deeper than `max_depth` (default `MAX_DEPTH`) is refused while composing, before
  PyYAML's recursive composer and constructor could overflow the stack.
- **Alias expansion** (billion laughs): every node is weighed as the number of nodes it stands
  for once aliases are expanded; a document weighing more than `EXPANSION_FLOOR` plus
  `EXPANSION_PER_CHAR` per character of its text is refused, as is an alias to a node that
  contains it. PyYAML shares aliased objects, so the harm would come later, from whatever walks
  the loaded document (validation, `policies show`, JSON encoding).
- **Integers** longer than `MAX_INT_CHARS` characters are refused (Python refuses to convert
  more than 4,300 digits with a bare ValueError, and no field needs such numbers).

The text is parsed by libyaml (PyYAML's `CParser`, its events only) when PyYAML has it and by
PyYAML's pure-Python parser otherwise; composing and constructing, where the bounds live, are
the same Python code either way, and any problem is reported by the pure-Python loader, so
what is refused and how it reads do not depend on libyaml.

Text only: reading files within bounds is `engine.loading.files`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from engine.core.errors import InputError

_CParser: Any = None  # libyaml's parser, when PyYAML was built with it
if yaml.__with_libyaml__:
    import yaml.cyaml

    _CParser = yaml.cyaml.CParser  # type: ignore[attr-defined]

MAX_DEPTH = 128
EXPANSION_FLOOR = 100_000
EXPANSION_PER_CHAR = 2
MAX_INT_CHARS = 100
_STR_TAG = "tag:yaml.org,2002:str"


class LineDict(dict[str, Any]):
    # Slots, not an attribute dict per mapping: a big manifest has hundreds of thousands.
    __slots__ = ("key_lines", "line")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line: int | None = None
        self.key_lines: dict[str, int] = {}


class LineList(list[Any]):
    __slots__ = ("line",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.line: int | None = None


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer, weighing nodes and refusing deep nesting while it composes."""

    def __init__(self, *, max_depth: int, max_weight: int) -> None:
        super().__init__()
        self.max_depth = max_depth
        self.max_weight = max_weight
        self._depth = 0
        self._weights: dict[int, int] = {}  # id(node) -> nodes it expands to
        # Without anchors nothing expands: a document weighs its node count, and counting
        # refuses exactly what weighing would (set by a loader that knows its text has none).
        self._count_only = False
        self._nodes = 0

    def compose_document(self) -> yaml.Node | None:
        try:
            document: yaml.Node | None = super().compose_document()
            return document
        finally:
            self._weights.clear()  # anchors do not outlive their document
            self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        # Without anchors an alias is an undefined one, which PyYAML's composer refuses.
        if not self._count_only and self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            mark = self.peek_event().start_mark  # type: ignore[attr-defined]
            node = super().compose_node(parent, index)
            if node is None or id(node) not in self._weights:
                raise yaml.composer.ComposerError(
                    None, None, "an alias refers to a node that contains it", mark)
            return node
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {self.max_depth} levels deep",
                    self.peek_event().start_mark)  # type: ignore[attr-defined]
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        assert node is not None  # only an alias event composes to None
        self._weigh(node)
        return node

    def _weigh(self, node: yaml.Node) -> None:
        if self._count_only:
            self._nodes += 1
            if self._nodes > self.max_weight:
                raise yaml.composer.ComposerError(
                    None, None, f"this document has more than {self.max_weight} values", None)
            return
        weights = self._weights
        weight = 1
        if isinstance(node, yaml.SequenceNode):
            weight += sum(weights[id(child)] for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            weight += sum(weights[id(key)] + weights[id(value)] for key, value in node.value)
        if weight > self.max_weight:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand this document to more than {self.max_weight} "
                "values", node.start_mark)
        weights[id(node)] = weight


class _LineConstructor(yaml.constructor.SafeConstructor):
    """The safe constructor, building `LineDict`s and `LineList`s (registered below)."""


class _LineLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
                  _BoundedComposer, _LineConstructor, yaml.resolver.Resolver):
    """PyYAML's pure-Python SafeLoader with the bounded composer and the line constructor."""

    def __init__(self, stream: str, *, max_depth: int, max_weight: int):
        yaml.reader.Reader.__init__(self, stream)  # checks the characters
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _BoundedComposer.__init__(self, max_depth=max_depth, max_weight=max_weight)
        _LineConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)


_CLineLoader: Any = None
if _CParser is not None:

    class _CEventLoader(_CParser, _BoundedComposer, _LineConstructor,  # type: ignore[misc]
                        yaml.resolver.Resolver):
        """The same loader reading libyaml's events: scanning and parsing in C, about four
        times faster. libyaml's own composer is not used: it recurses in C without a depth
        limit (a deeply nested text crashes the process), and the bounds live in ours. Its
        errors are not shown: `load_yaml_documents` has the pure-Python loader say why."""

        check_node = _BoundedComposer.check_node
        get_node = _BoundedComposer.get_node
        get_single_node = _BoundedComposer.get_single_node

        def __init__(self, stream: str, *, max_depth: int, max_weight: int):
            _CParser.__init__(self, stream)
            _BoundedComposer.__init__(self, max_depth=max_depth, max_weight=max_weight)
            self._count_only = "&" not in stream  # no anchor, no alias to expand
            _LineConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    _CLineLoader = _CEventLoader


def _construct_int(loader: _LineConstructor, node: yaml.ScalarNode) -> int:
    if len(node.value) > MAX_INT_CHARS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of more than {MAX_INT_CHARS} characters", node.start_mark)
    return loader.construct_yaml_int(node)


def _construct_mapping(loader: _LineConstructor, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = _constructed(loader, key_node)
        if not isinstance(key, str | int | float | bool):
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be scalars", key_node.start_mark
            )
        text = str(key)
        result[text] = _constructed(loader, value_node)
        result.key_lines[text] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _LineConstructor, node: yaml.SequenceNode) -> LineList:
    result = LineList(_constructed(loader, child) for child in node.value)
    result.line = node.start_mark.line + 1
    return result


def _constructed(loader: _LineConstructor, node: yaml.Node) -> Any:
    """`loader.construct_object(node, deep=True)`, without its machinery for the commonest
    node by far: a string scalar, which constructs to its own text."""
    if type(node) is yaml.ScalarNode and node.tag == _STR_TAG:
        return node.value
    return loader.construct_object(node, deep=True)


_LineConstructor.add_constructor(  # type: ignore[type-var]
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineConstructor.add_constructor(  # type: ignore[type-var]
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_LineConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", _construct_int)


def load_yaml_documents(text: str, file: str, *, max_depth: int = MAX_DEPTH) -> list[Any]:
    """All documents of a YAML text, mappings as LineDict and lists as LineList, within the
    module's bounds on nesting, alias expansion and integer size.

    Read with libyaml's events when PyYAML has them; on any problem the pure-Python loader
    reads the text again, so what is refused, and the words and line saying why, are always
    the same.
    """
    max_weight = EXPANSION_FLOOR + EXPANSION_PER_CHAR * len(text)
    if _CLineLoader is not None:
        try:
            return _documents(_CLineLoader(text, max_depth=max_depth, max_weight=max_weight))
        except (yaml.YAMLError, ValueError, RecursionError):
            pass
    loader: _LineLoader | None = None
    try:
        loader = _LineLoader(text, max_depth=max_depth, max_weight=max_weight)
        return _documents(loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {exc.problem or exc}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=file) from None
    except (ValueError, RecursionError) as exc:  # last resort: PyYAML's own conversions
        raise InputError(f"invalid YAML: {' '.join(str(exc).split())[:200]}", file=file,
                         line=_current_line(loader)) from None


def _documents(loader: Any) -> list[Any]:
    """The non-empty documents `loader` reads; it is disposed of either way."""
    try:
        documents = []
        while loader.check_data():
            document = loader.get_data()
            if document is not None:
                documents.append(document)
        return documents
    finally:
        loader.dispose()


def _current_line(loader: _LineLoader | None) -> int | None:
    mark = getattr(loader, "mark", None) or getattr(loader, "problem_mark", None)
    return mark.line + 1 if mark is not None else None


def line_of(value: Any, key: str | None = None) -> int | None:
    """Line of a loaded mapping or list, or of one key inside a mapping."""
    if key is not None and isinstance(value, LineDict) and key in value.key_lines:
        return value.key_lines[key]
    return getattr(value, "line", None)


def line_at(doc: Any, loc: Iterable[int | str]) -> int | None:
    """The line of the deepest node on a path into a loaded document (a pydantic error `loc`)."""
    node, line = doc, line_of(doc)
    for key in loc:
        line = line_of(node, str(key)) or line
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            break
        line = line_of(node) or line
    return line
