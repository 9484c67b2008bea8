"""Tag and label conventions shared by every door: production, exemptions, key matching."""

from __future__ import annotations

import re
from collections.abc import Mapping

from engine.model import Resource
from engine.tristate import Tri

PRODUCTION_KEYS = frozenset({"env", "environment"})
PRODUCTION_VALUES = frozenset({"prod", "production"})
EXEMPT_KEYS = ("gpuwarden.io/exempt", "gpuwarden-exempt")
_EXEMPT_SEPARATORS = re.compile(r"[\s,_]+")


def normalize_key(key: str) -> str:
    """Tag keys match case-insensitively with `-` and `_` equal."""
    return key.lower().replace("_", "-")


def _environment(labels: Mapping[str, str]) -> str | None:
    for key, value in labels.items():
        if key.lower() in PRODUCTION_KEYS:
            return str(value).lower()
    return None


_last_production: tuple[Resource | None, Tri] = (None, None)


def is_production(resource: Resource) -> Tri:
    """Production by the resource's own env tag; on Kubernetes, else by its namespace's labels.

    Several policies ask this of the same resource in a row: the last answer is kept.
    """
    global _last_production
    last, answer = _last_production
    if last is resource:
        return answer
    if resource.is_unknown("tags"):
        answer = None
    else:
        environment = _environment(resource.tags)
        if environment is None:
            environment = _environment(resource.namespace_labels)
        answer = environment in PRODUCTION_VALUES
    _last_production = (resource, answer)
    return answer


def exempt_policies(resource: Resource) -> frozenset[str]:
    """Policy ids (or `all`) a resource is exempted from by tag, label or annotation."""
    ids: set[str] = set()
    for source in (resource.tags, resource.annotations):
        for key in EXEMPT_KEYS:
            value = source.get(key)
            if value:
                ids.update(part for part in _EXEMPT_SEPARATORS.split(value.strip()) if part)
    return frozenset(ids)


def is_exempt(resource: Resource, policy_id: str) -> bool:
    if not resource.tags and not resource.annotations:
        return False
    ids = exempt_policies(resource)
    return policy_id in ids or "all" in ids


def missing_tags(tags: Mapping[str, str], required: list[str]) -> list[str]:
    present = {key.lower().replace("_", "-") for key, value in tags.items() if str(value).strip()}
    return [key for key in required if normalize_key(key) not in present]
