"""JSONPatch (RFC 6902) builders for the admission webhook's built-in remediations.

Pure functions over plain Kubernetes object dicts: a Pod or any controller with a pod template.
Every builder is idempotent: applied to the object its own patch produced, it returns `[]`.
A builder that cannot patch safely (a field of the wrong type, a node affinity that contradicts
spot) returns `[]` and leaves the decision to the validating webhook.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from engine.sources.kubernetes import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SPOT_LABELS,
    SPOT_TOLERATIONS,
    effective_gpu_requests,
    gpu_quantity,
    kind_entry,
    pod_groups,
    pod_template_path,
)

Patch = list[dict[str, Any]]
PathParts = tuple[str | int, ...]
CLOUDS: tuple[str, ...] = tuple(SPOT_LABELS)
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-\d+g\.\d+gb(?:\+me)?$")


def escape_token(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): `~` → `~0`, `/` → `~1`, in that order."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + escape_token(str(part)) for part in path)


def pod_spec_of(obj: dict[str, Any]) -> tuple[PathParts, dict[str, Any]] | None:
    """(path to the pod spec, the pod spec) of a workload object; None when it has none."""
    path = pod_template_path(obj)
    if path is None:
        return None
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return (path, value) if isinstance(value, dict) else None


# ---------------------------------------------------------------------------- spot placement


def spot_placement_patch(obj: dict[str, Any], cloud: str) -> Patch:
    """Pin the workload to `cloud`'s spot capacity: nodeSelector label plus the toleration its
    spot nodes' taint needs, in its pod template or, for a training kind (PyTorchJob, RayJob,
    JobSet ...), in each replica template that holds GPUs. `[]` when already pinned, or when any
    template cannot be patched safely."""
    if cloud not in SPOT_LABELS:
        raise ValueError(f"unknown cloud {cloud!r}; expected one of {', '.join(CLOUDS)}")
    patch: Patch = []
    for path, spec in spot_targets(obj):
        ops = _spot_ops(path, spec, cloud)
        if ops is None:
            return []
        patch += ops
    return patch


def spot_targets(obj: dict[str, Any]) -> list[tuple[PathParts, dict[str, Any]]]:
    """(path, pod spec) of every template the spot patch pins."""
    found = pod_spec_of(obj)
    if found is not None:
        return [found]
    entry = kind_entry(obj)
    if entry is None or not entry.training:
        return []
    return [(group.path, group.spec) for group in pod_groups(obj)
            if group.path is not None and _holds_gpus(group.spec)]


def _holds_gpus(spec: dict[str, Any]) -> bool:
    requests = effective_gpu_requests(spec)
    return requests.malformed or any(amount > 0 for amount in requests.amounts.values()) \
        or bool(spec.get("resourceClaims"))


def _spot_ops(path: PathParts, spec: dict[str, Any], cloud: str) -> Patch | None:
    key, value = SPOT_LABELS[cloud]
    if _affinity_contradicts(spec, key, value):
        return None
    selector_ops = _node_selector_ops(path, spec.get("nodeSelector"), key, value)
    toleration_ops = _toleration_ops(path, spec.get("tolerations"), SPOT_TOLERATIONS[cloud])
    if selector_ops is None or toleration_ops is None:
        return None
    return selector_ops + toleration_ops


def _node_selector_ops(
    path: PathParts, selector: Any, key: str, value: str
) -> Patch | None:
    if selector is None:
        return [{"op": "add", "path": pointer((*path, "nodeSelector")), "value": {key: value}}]
    if not isinstance(selector, dict):
        return None
    if selector.get(key) == value:
        return []
    # `add` on an existing member replaces it (RFC 6902 §4.1): one op for both cases.
    return [{"op": "add", "path": pointer((*path, "nodeSelector", key)), "value": value}]


def _toleration_ops(
    path: PathParts, tolerations: Any, needed: Sequence[dict[str, str]]
) -> Patch | None:
    if tolerations is not None and not isinstance(tolerations, list):
        return None
    present = list(tolerations or [])
    missing = [dict(t) for t in needed if not any(_tolerates(have, t) for have in present)]
    if not missing:
        return []
    if tolerations is None:
        return [{"op": "add", "path": pointer((*path, "tolerations")), "value": missing}]
    return [
        {"op": "add", "path": pointer((*path, "tolerations", "-")), "value": toleration}
        for toleration in missing
    ]


def _tolerates(have: Any, taint: dict[str, str]) -> bool:
    """Whether an existing toleration already tolerates the spot taint (kube's matching rules)."""
    if not isinstance(have, dict):
        return False
    effect = have.get("effect")
    if effect not in (None, "", taint["effect"]):
        return False
    operator = have.get("operator") or "Equal"
    key = have.get("key")
    if not key:
        return operator == "Exists"  # an empty key with Exists tolerates every taint
    if key != taint["key"]:
        return False
    return operator == "Exists" or have.get("value") == taint["value"]


def _affinity_contradicts(spec: dict[str, Any], key: str, value: str) -> bool:
    """True when a required node-affinity term constrains `key` to something other than spot:
    adding the spot nodeSelector would make the pod unschedulable."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, dict)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    for term in terms if isinstance(terms, list) else []:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        for expression in expressions if isinstance(expressions, list) else []:
            if not isinstance(expression, dict) or expression.get("key") != key:
                continue
            operator, values = expression.get("operator"), expression.get("values")
            allowed = isinstance(values, list) and value in values
            if operator == "Exists" or (operator == "In" and allowed):
                continue
            if operator == "NotIn" and not allowed:
                continue
            return True
    return False


# ---------------------------------------------------------------------------- MIG swap


def mig_swap_patch(obj: dict[str, Any], mig_resource: str) -> Patch:
    """Swap every container's whole `nvidia.com/gpu` for `mig_resource`, same quantity (one
    slice per GPU), in limits and requests of containers and initContainers. `[]` when nothing
    requests a whole GPU.
    """
    if not _MIG_RESOURCE.match(mig_resource):
        raise ValueError(f"not a MIG resource name: {mig_resource!r}")
    found = pod_spec_of(obj)
    if found is None:
        return []
    path, spec = found
    patch: Patch = []
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            for section in ("limits", "requests"):
                amounts = resources.get(section)
                where = (*path, field, index, "resources", section)
                patch.extend(_swap_ops(where, amounts, mig_resource))
    return patch


def _swap_ops(where: tuple[str | int, ...], amounts: Any, mig_resource: str) -> Patch:
    if not isinstance(amounts, dict) or not gpu_quantity(amounts.get(GPU_RESOURCE)):
        return []  # absent, zero or unreadable: nothing to swap
    if any(isinstance(k, str) and k.startswith(MIG_RESOURCE_PREFIX) for k in amounts):
        return []  # already mixes MIG slices and whole GPUs: not ours to untangle
    return [
        {"op": "remove", "path": pointer((*where, GPU_RESOURCE))},
        {"op": "add", "path": pointer((*where, mig_resource)), "value": amounts[GPU_RESOURCE]},
    ]
