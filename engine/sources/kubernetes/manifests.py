"""Kubernetes objects from YAML or JSON manifests (multi-document, `List` kinds flattened), and
Namespace objects read for their labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from engine.core.errors import InputError
from engine.sources.kubernetes.objects import as_mapping, string_map


def load_manifests(text: str, source: str) -> list[dict[str, Any]]:
    """Kubernetes objects in a (multi-document) YAML or JSON text, `List` kinds flattened.

    Items of API lists (`PodList`, `DeploymentList`...) get the list's item kind and apiVersion
    when they lack them, as the API server leaves them out.
    """
    objects: list[dict[str, Any]] = []
    for line, document in _yaml_documents(text, source):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(
                "expected a Kubernetes object (a mapping with kind), "
                f"got {type(document).__name__}",
                file=source,
                line=line,
            )
        objects.extend(_flatten_lists(document))
    return objects


def _yaml_documents(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(first line, value) of each YAML document; YAML errors as InputError with their line."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is not None:
                    yield node.start_mark.line + 1, loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {problem}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {' '.join(str(exc).split())}", file=source) from None
    except RecursionError:
        raise InputError("invalid YAML: nested too deeply", file=source) from None


def _flatten_lists(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = obj.get("kind")
    items = obj.get("items")
    if not (isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)):
        yield obj
        return
    item_kind = kind[: -len("List")]
    for item in items:
        if not isinstance(item, dict):
            continue
        if item_kind and "kind" not in item:
            item = {"kind": item_kind, **item}
            if "apiVersion" in obj and "apiVersion" not in item:
                item = {"apiVersion": obj["apiVersion"], **item}
        yield from _flatten_lists(item)


def namespace_resource(obj: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Name and labels of a Namespace object, for a namespace-label cache."""
    if not isinstance(obj, dict) or obj.get("kind") != "Namespace":
        raise InputError("expected a Namespace object")
    metadata = as_mapping(obj.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("Namespace object has no metadata.name")
    return name, string_map(metadata.get("labels"))
