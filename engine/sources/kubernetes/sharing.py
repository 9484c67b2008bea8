"""GPU sharing without hardware isolation: time-slicing, MPS and HAMi virtual GPUs, as a pod
requests it (`nvidia.com/gpu.shared`, `nvidia.com/gpumem` / `gpucores`) or as the labels of the
nodes it can land on say.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from engine.sources.kubernetes.gpu_models import GPU_PRODUCT_LABEL
from engine.sources.kubernetes.objects import as_list, as_mapping
from engine.sources.kubernetes.placement import every_term, node_requirements

# Time-slicing with renameByDefault: the device plugin advertises shared GPUs under this name.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU feature discovery: > 1 when shared
# HAMi virtual GPUs: a share of a GPU's memory or cores; nvidia.com/gpu then counts shares.
HAMI_SHARE_RESOURCES = frozenset({"nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                                  "nvidia.com/gpucores"})
SHARED_PRODUCT_SUFFIX = "-SHARED"  # GFD's product label on shared GPUs (renameByDefault false)
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # per-node plugin config name

# Node labels naming a GPU sharing strategy without hardware isolation: key -> such values.
_SHARING_STRATEGY_LABELS: dict[str, frozenset[str]] = {
    "nvidia.com/gpu.sharing-strategy": frozenset({"time-slicing", "mps"}),
    "cloud.google.com/gke-gpu-sharing-strategy": frozenset({"time-sharing", "mps"}),
}


def node_shares_gpus(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say its GPUs are shared without hardware isolation."""
    return any(_shares(key, "In", (value,)) for key, value in labels.items())


def any_shared(pod_specs: Iterator[dict[str, Any]]) -> bool | None:
    verdicts = [_shared_gpu(spec) for spec in pod_specs]
    if True in verdicts:
        return True
    return None if None in verdicts else False


def _shared_gpu(pod_spec: dict[str, Any]) -> bool | None:
    """True when the pod asks for a shared GPU (`nvidia.com/gpu.shared`, or every node it can
    land on is time-sliced / MPS by its labels); None when it may land on shared GPUs or pins a
    device-plugin configuration whose content is not known here; else False."""
    for container in as_list(pod_spec.get("containers")) + as_list(pod_spec.get("initContainers")):
        resources = as_mapping(as_mapping(container).get("resources"))
        for part in ("limits", "requests"):
            names = as_mapping(resources.get(part)).keys()
            if SHARED_GPU_RESOURCE in names or not HAMI_SHARE_RESOURCES.isdisjoint(names):
                return True
    terms = node_requirements(pod_spec)
    if every_term(terms, _shares):
        return True
    if any(key == DEVICE_PLUGIN_CONFIG_LABEL or _shares(key, operator, values)
           for term in terms for key, operator, values in term):
        return None
    return False


def _shares(key: str, operator: str, values: tuple[str, ...]) -> bool:
    if key in _SHARING_STRATEGY_LABELS:
        return operator == "In" and bool(values) and all(
            v in _SHARING_STRATEGY_LABELS[key] for v in values)
    if key == GPU_REPLICAS_LABEL:
        if operator == "Exists":
            return True
        if operator == "Gt":
            return bool(values) and values[0].isdigit() and int(values[0]) >= 1
        return operator == "In" and bool(values) and all(
            v.isdigit() and int(v) > 1 for v in values)
    if key == GPU_PRODUCT_LABEL:
        return operator == "In" and bool(values) and all(
            v.upper().endswith(SHARED_PRODUCT_SUFFIX) for v in values)
    return False
