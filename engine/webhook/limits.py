"""Kubernetes' own size limits on the strings the webhook reads from an admitted object.

A mutating webhook sees an object before the API server validates it, and anything that can reach
the service can post a review directly, so nothing here trusts the object. Every string the
policies and the GPU-model matching read is measured first; an object over a limit the API
server enforces is refused as invalid (the API server would refuse it anyway) and never
evaluated. Only lengths are measured: cheap, linear in the object's metadata and node selection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine.sources.kubernetes import pod_groups, pod_template

MAX_NAME_CHARS = 253  # metadata.name, generateName, spec.nodeName: DNS subdomain
MAX_NAMESPACE_CHARS = 63  # DNS label
MAX_LABEL_VALUE_CHARS = 63
MAX_KEY_PREFIX_CHARS = 253  # `prefix/` of a qualified name: DNS subdomain
MAX_KEY_NAME_CHARS = 63  # `name` of a qualified name
MAX_ANNOTATIONS_BYTES = 256 * 1024  # all keys and values of one object's annotations together


class ObjectTooLarge(ValueError):
    """An object breaks a Kubernetes size limit; the message names the field and the limit."""


def check_object(obj: dict[str, Any], request_kind: str) -> None:
    """Raise ObjectTooLarge for the first field of `obj` over a Kubernetes limit. `request_kind`
    stands in for an object kind that is missing or not a string (optional in a CREATE body)."""
    if not isinstance(obj.get("kind"), str):
        obj = {**obj, "kind": request_kind}
    for where, metadata in _metadata_blocks(obj):
        _check_metadata(where, metadata)
    for where, spec in _pod_specs(obj):
        _check_node_selection(where, spec)


# ---------------------------------------------------------------------------- where to look


def _metadata_blocks(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "metadata", _mapping(obj.get("metadata"))
    job_template = _mapping(_mapping(obj.get("spec")).get("jobTemplate"))
    if job_template:
        yield "spec.jobTemplate.metadata", _mapping(job_template.get("metadata"))
    template = pod_template(obj)
    if template is not None:
        yield "pod template metadata", template[0]
    for group in pod_groups(obj):
        yield "replica template metadata", group.metadata


def _pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    template = pod_template(obj)
    if template is not None:
        yield "pod spec", template[1]
    for group in pod_groups(obj):
        yield "replica pod spec", group.spec


# ---------------------------------------------------------------------------- checks


def _check_metadata(where: str, metadata: dict[str, Any]) -> None:
    for field, limit in (("name", MAX_NAME_CHARS), ("generateName", MAX_NAME_CHARS),
                         ("namespace", MAX_NAMESPACE_CHARS)):
        _check_length(f"{where}.{field}", metadata.get(field), limit)
    labels = _mapping(metadata.get("labels"))
    for key, value in labels.items():
        _check_key(f"{where}.labels", key)
        _check_length(f"{where}.labels[{_shown(key)}]", value, MAX_LABEL_VALUE_CHARS)
    annotations = _mapping(metadata.get("annotations"))
    total = 0
    for key, value in annotations.items():
        _check_key(f"{where}.annotations", key)
        total += _utf8_length(key) + (_utf8_length(value) if isinstance(value, str) else 0)
    if total > MAX_ANNOTATIONS_BYTES:
        raise ObjectTooLarge(f"{where}.annotations total {total} bytes, over Kubernetes' "
                             f"{MAX_ANNOTATIONS_BYTES}-byte limit")


def _check_node_selection(where: str, spec: dict[str, Any]) -> None:
    """nodeSelector, required and preferred node affinity, tolerations: label keys and values
    as the API server validates them (node affinity In/NotIn values are label values)."""
    _check_length(f"{where}.nodeName", spec.get("nodeName"), MAX_NAME_CHARS)
    for key, value in _mapping(spec.get("nodeSelector")).items():
        _check_key(f"{where}.nodeSelector", key)
        _check_length(f"{where}.nodeSelector[{_shown(key)}]", value, MAX_LABEL_VALUE_CHARS)
    for expression in _node_affinity_expressions(spec):
        affinity_key = expression.get("key")
        _check_key(f"{where}.affinity.nodeAffinity", affinity_key)
        for value in _list(expression.get("values")):
            _check_length(f"{where}.affinity.nodeAffinity[{_shown(affinity_key)}] value", value,
                          MAX_LABEL_VALUE_CHARS)
    for toleration in _list(spec.get("tolerations")):
        toleration = _mapping(toleration)
        _check_key(f"{where}.tolerations", toleration.get("key"))
        _check_length(f"{where}.tolerations[{_shown(toleration.get('key'))}].value",
                      toleration.get("value"), MAX_LABEL_VALUE_CHARS)


def _node_affinity_expressions(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = _list(required.get("nodeSelectorTerms"))
    terms += [_mapping(p).get("preference")
              for p in _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))]
    for term in terms:
        term = _mapping(term)
        for expression in _list(term.get("matchExpressions")):
            yield _mapping(expression)


def _check_key(where: str, key: Any) -> None:
    """A qualified name: an optional DNS-subdomain prefix and `/`, then a name of ≤ 63."""
    if not isinstance(key, str):
        return
    prefix, slash, name = key.rpartition("/")
    if slash and len(prefix) > MAX_KEY_PREFIX_CHARS:
        raise ObjectTooLarge(f"{where} key prefix {_shown(prefix)} is {len(prefix)} characters, "
                             f"over Kubernetes' {MAX_KEY_PREFIX_CHARS}-character limit")
    if len(name) > MAX_KEY_NAME_CHARS:
        raise ObjectTooLarge(f"{where} key {_shown(key)} has a {len(name)}-character name, "
                             f"over Kubernetes' {MAX_KEY_NAME_CHARS}-character limit")


def _check_length(where: str, value: Any, limit: int) -> None:
    if isinstance(value, str) and len(value) > limit:
        raise ObjectTooLarge(f"{where} is {len(value)} characters, over Kubernetes' "
                             f"{limit}-character limit")


def _utf8_length(text: str) -> int:
    # Kubernetes counts bytes; ASCII (nearly every annotation) needs no encoding to count.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
