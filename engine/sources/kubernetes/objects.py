"""Kubernetes API objects read loosely: a field of the wrong type reads as absent, so what the
API server let through never crashes the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROVIDER = "kubernetes"


def as_mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def label_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def string_map(value: Any) -> dict[str, str]:
    """A labels/annotations mapping with scalar values as strings; anything else dropped."""
    if not isinstance(value, Mapping):
        return {}
    result: dict[str, str] = {}
    for key, item in value.items():
        text = label_value(item)
        if isinstance(key, str) and text is not None:
            result[key] = text
    return result


def first_wins(*sources: Any) -> dict[str, str]:
    merged: dict[str, str] = {}
    for source in sources:
        for key, value in string_map(source).items():
            merged.setdefault(key, value)
    return merged


def string_keys(obj: dict[Any, Any]) -> dict[str, Any]:
    if all(isinstance(key, str) for key in obj):
        return obj
    return {str(key): value for key, value in obj.items()}


def dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        value = as_mapping(value).get(key)
    return value


def count_field(spec: dict[str, Any], key: str) -> tuple[int | None, bool]:
    """(a non-negative integer field, or None when absent or unreadable; whether readable)."""
    value = spec.get(key)
    if value is None:
        return None, True
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, True
    return None, False


def controller_owner(metadata: dict[str, Any]) -> str | None:
    references = metadata.get("ownerReferences")
    for reference in references if isinstance(references, list) else []:
        if isinstance(reference, dict) and reference.get("controller") is True:
            kind, name = as_text(reference.get("kind")), as_text(reference.get("name"))
            if kind and name:
                return f"{kind}/{name}"
    return None
