"""No silent pass: an object of a kind gpuwarden cannot read that still asks for accelerators
somewhere in its spec (`nvidia.com/*` or `amd.com/gpu` requests, a DRA claim) becomes a resource
whose GPUs are unknown, so every GPU policy says `unknown` and names the kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.evaluate import UNREAD_KIND  # the unknown path: the kind is not understood
from engine.core.model import Category, GpuSpec, Resource, State
from engine.sources.kubernetes.crd_kinds import api_group
from engine.sources.kubernetes.objects import (
    PROVIDER,
    as_mapping,
    as_text,
    first_wins,
    string_keys,
    string_map,
)

MAX_DEPTH = 24
MAX_NODES = 20_000
_REQUEST_BLOCKS = frozenset({"limits", "requests"})
_CLAIM_KEYS = frozenset({"resourceClaims", "resourceClaimTemplateName", "resourceClaimName"})


def unread_kind_resource(obj: dict[str, Any], namespace_labels: Mapping[str, str] | None, *,
                         state: State, cluster: str | None) -> Resource | None:
    """A workload with unknown GPUs for an unregistered kind that asks for accelerators; else
    None (the kind holds no GPU request gpuwarden can see)."""
    kind = as_text(obj.get("kind"))
    asked = accelerator_requests(obj.get("spec"))
    if kind is None or not asked:
        return None
    metadata = as_mapping(obj.get("metadata"))
    namespace = as_text(metadata.get("namespace")) or "default"
    name = as_text(metadata.get("name")) or as_text(metadata.get("generateName")) or "<unnamed>"
    return Resource(
        provider=PROVIDER, kind=kind, category=Category.WORKLOAD,
        id=f"{kind}/{namespace}/{name}", name=name, cluster=cluster, namespace=namespace,
        tags=first_wins(metadata.get("labels")),
        annotations=first_wins(metadata.get("annotations")),
        namespace_labels=string_map(namespace_labels),
        gpu=GpuSpec(count=None), state=state,
        unknown=frozenset({"gpu", UNREAD_KIND}),
        raw={**string_keys(obj), "gpuwarden_unread": {
            "group": api_group(obj), "kind": kind, "asks": sorted(asked)[:8]}},
    )


def accelerator_requests(spec: Any) -> set[str]:
    """Accelerator resource names and DRA claim keys found in `spec` (depth and size bounded)."""
    found: set[str] = set()
    stack: list[tuple[Any, str, int]] = [(spec, "", 0)]
    visited = 0
    while stack and visited < MAX_NODES:
        value, parent, depth = stack.pop()
        visited += 1
        if depth > MAX_DEPTH:
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    continue
                if parent in _REQUEST_BLOCKS and _is_accelerator(key):
                    found.add(key)
                elif key in _CLAIM_KEYS and item:
                    found.add("DRA claim")
                stack.append((item, key, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, parent, depth + 1) for item in value)
        elif isinstance(value, str) and parent == "name" and _is_accelerator(value):
            found.add(value)  # a `{name: nvidia.com/gpu, quantity: n}` block
    return found


def _is_accelerator(name: str) -> bool:
    return name.startswith("nvidia.com/") or name.startswith("amd.com/gpu") \
        or name.startswith("gpu.intel.com/")


def with_unread_gpus(obj: dict[str, Any], resource: Resource) -> Resource:
    """A registered kind read without GPUs whose spec still asks for accelerators somewhere its
    entry does not look (a GPU in an override block): its GPUs are unknown, not none."""
    if resource.has_gpu or resource.is_unknown("gpu") or not accelerator_requests(obj.get("spec")):
        return resource
    return resource.model_copy(update={"gpu": GpuSpec(count=None),
                                       "unknown": resource.unknown | {"gpu", UNREAD_KIND}})
