"""YAML loading that remembers where each mapping and list came from, for `file:line` errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from engine.errors import InputError


class LineDict(dict[str, Any]):
    line: int | None = None
    key_lines: dict[str, int]


class LineList(list[Any]):
    line: int | None = None


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool):
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be scalars", key_node.start_mark
            )
        result[str(key)] = loader.construct_object(value_node, deep=True)
        result.key_lines[str(key)] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml_documents(text: str, file: str) -> list[Any]:
    """All documents of a YAML text, mappings as LineDict and lists as LineList."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_LineLoader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {exc.problem or exc}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=file) from None


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
