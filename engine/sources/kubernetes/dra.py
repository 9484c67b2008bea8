"""Dynamic Resource Allocation: GPUs a pod gets through ResourceClaims (`resource.k8s.io`), as the
ResourceClaim / ResourceClaimTemplate it names describes them.

A claim's devices count as GPUs when their device class is a GPU class (`gpu.nvidia.com`,
`mig.nvidia.com`, the example driver's `gpu.example.com`, any class naming a GPU).
`allocationMode: All` takes every matching device of a node: at least one, how many is not known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.sources.kubernetes.objects import as_list, as_mapping, as_text, count_field, dig

CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
MAX_CLAIM_REQUESTS = 32


@dataclass(frozen=True)
class DeviceClaim:
    """The GPUs one claim allocates: `gpus` (a lower bound when not `exact`)."""

    gpus: int
    exact: bool = True


ClaimIndex = Mapping[tuple[str, str, str], DeviceClaim]  # (kind, namespace, name) → claim


@dataclass(frozen=True)
class PodClaims:
    """GPUs of a pod's claims: `gpus`, whether exact, and whether every claim was known."""

    gpus: float = 0.0
    exact: bool = True
    known: bool = True
    referenced: bool = False
    missing: tuple[str, ...] = ()  # the claims not found, as "Kind namespace/name"


def is_gpu_class(name: str | None) -> bool:
    lowered = (name or "").lower()
    return "gpu" in lowered or lowered.startswith("mig.")


def device_claim(obj: dict[str, Any]) -> DeviceClaim:
    """What a ResourceClaim (spec.devices) or ResourceClaimTemplate (spec.spec.devices) asks."""
    spec = as_mapping(obj.get("spec"))
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = as_mapping(spec.get("spec"))
    gpus, exact = 0, True
    for request in as_list(dig(spec, ("devices", "requests")))[:MAX_CLAIM_REQUESTS]:
        count, request_exact = _request_gpus(as_mapping(request))
        gpus += count
        exact = exact and request_exact
    return DeviceClaim(gpus, exact)


def _request_gpus(request: dict[str, Any]) -> tuple[int, bool]:
    """(GPUs of one device request, exact). v1 nests the request under `exactly`; an alternative
    list (`firstAvailable`) counts as its first GPU alternative."""
    request = as_mapping(request.get("exactly")) or request
    alternatives = as_list(request.get("firstAvailable"))
    if alternatives:
        request = next((as_mapping(a) for a in alternatives
                        if is_gpu_class(as_text(as_mapping(a).get("deviceClassName")))), {})
    if not is_gpu_class(as_text(request.get("deviceClassName"))):
        return 0, True
    if request.get("allocationMode") == "All":
        return 1, False
    count, readable = count_field(request, "count")
    return (1 if count is None else count), readable


def claim_index(objects: Iterable[Any]) -> dict[tuple[str, str, str], DeviceClaim]:
    """(kind, namespace, name) → its claim, for every ResourceClaim(Template) among `objects`."""
    index: dict[tuple[str, str, str], DeviceClaim] = {}
    for obj in objects:
        if not isinstance(obj, dict) or obj.get("kind") not in CLAIM_KINDS:
            continue
        metadata = as_mapping(obj.get("metadata"))
        name = as_text(metadata.get("name"))
        if name:
            namespace = as_text(metadata.get("namespace")) or "default"
            index[(str(obj["kind"]), namespace, name)] = device_claim(obj)
    return index


def pod_claims(pod_spec: dict[str, Any], namespace: str,
               index: ClaimIndex | None) -> PodClaims:
    """GPUs the pod's `resourceClaims` allocate; a claim not in `index` makes them unknown."""
    gpus, exact, referenced = 0.0, True, False
    missing: list[str] = []
    for entry in as_list(pod_spec.get("resourceClaims"))[:MAX_CLAIM_REQUESTS]:
        entry = as_mapping(entry)
        template = as_text(entry.get("resourceClaimTemplateName"))
        claim = as_text(entry.get("resourceClaimName"))
        if not (template or claim):
            continue
        referenced = True
        key = ("ResourceClaimTemplate", namespace, template) if template else (
            "ResourceClaim", namespace, str(claim))
        found = (index or {}).get(key)
        if found is None:
            missing.append(f"{key[0]} {namespace}/{key[2]}")
            continue
        gpus += found.gpus
        exact = exact and found.exact
    return PodClaims(gpus, exact, not missing, referenced, tuple(missing))
