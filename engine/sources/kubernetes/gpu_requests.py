"""GPU requests of a pod: whole GPUs (`nvidia.com/gpu`) and MIG slices (`nvidia.com/mig-<profile>`)
as the scheduler counts them, and the `GpuSpec` they make with the GPU model the pod is pinned to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.enrich import CLAIM_MISS_PREFIX
from engine.core.model import GpuSpec
from engine.sources.kubernetes.dra import PodClaims
from engine.sources.kubernetes.gpu_models import (
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    MAX_LABEL_VALUE_CHARS,
    gpu_model,
    memory_label_gib,
    mig_profile_model,
    placement_gpu_model,
)
from engine.sources.kubernetes.objects import as_list, as_mapping
from engine.sources.kubernetes.placement import Term, node_requirements, pinned_value
from engine.sources.kubernetes.quantities import declared_memory_gib, gpu_quantity

GPU_RESOURCE = "nvidia.com/gpu"
AMD_GPU_RESOURCE = "amd.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_MEMORY_ANNOTATION = "gpuwarden.io/gpu-memory"
_MIG_IN_PRODUCT = re.compile(r"^(.+)-MIG-(\d+g\.\d+gb)$", re.IGNORECASE)


@dataclass
class GpuRequests:
    """Effective pod-level extended-resource requests; `malformed` when one was unreadable."""

    amounts: dict[str, float] = field(default_factory=dict)
    malformed: bool = False


def gpu_spec(
    pod_spec: dict[str, Any], annotations: dict[str, str], catalog: Catalog | None,
    claims: PodClaims | None = None,
) -> tuple[GpuSpec | None, frozenset[str]]:
    """(GPU spec per pod or None when no GPU is requested, the unknown paths it leaves).

    Unknown paths: `gpu` (a request unreadable, or a DRA claim not known), `gpu.count` (the count
    is a lower bound: a claim of every device of a node), `gpu.declared_memory_gib`.
    """
    requests = effective_gpu_requests(pod_spec)
    claims = claims or PodClaims()
    whole = requests.amounts.get(GPU_RESOURCE, 0.0) + requests.amounts.get(AMD_GPU_RESOURCE, 0.0)
    whole += claims.gpus
    migs = {
        name[len(MIG_RESOURCE_PREFIX) :]: int(amount)
        for name, amount in requests.amounts.items()
        if name.startswith(MIG_RESOURCE_PREFIX) and amount > 0
    }
    declared, declared_known = declared_memory_gib(annotations.get(GPU_MEMORY_ANNOTATION))
    unknown = set() if declared_known else {"gpu.declared_memory_gib"}
    if requests.malformed or not claims.known:
        unknown.add("gpu")
    unknown.update(CLAIM_MISS_PREFIX + claim for claim in claims.missing)
    if not claims.exact:
        unknown.add("gpu.count")
    if whole == 0 and not migs and "gpu" not in unknown:
        return None, frozenset(unknown - {"gpu.count"})

    requirements = node_requirements(pod_spec)
    model, memory, migs, whole = _pinned_model(requirements, migs, whole, catalog)
    if memory is None:
        memory = memory_label_gib(pinned_value(requirements, GPU_MEMORY_LABEL))

    mig_profile = max(migs, key=_mig_memory) if migs else None
    spec = GpuSpec(
        model=model,
        count=None if "gpu" in unknown else whole,
        memory_gib=memory,
        mig_profile=mig_profile,
        mig_count=sum(migs.values()),
        declared_memory_gib=declared,
    )
    return spec, frozenset(unknown)


def _pinned_model(requirements: list[Term], migs: dict[str, int], whole: float,
                  catalog: Catalog | None
                  ) -> tuple[str | None, float | None, dict[str, int], float]:
    """(GPU model, memory per GPU, MIG slices, whole GPUs) from the node labels a pod pins."""
    catalog = catalog or builtin_catalog()
    product = pinned_value(requirements, GPU_PRODUCT_LABEL)
    if product is not None and len(product) > MAX_LABEL_VALUE_CHARS:
        product = None  # no node carries a label value that long: no GPU model is pinned
    slice_of = _MIG_IN_PRODUCT.match(product) if product else None
    if slice_of:
        # MIG "single" strategy: nvidia.com/gpu on such a node is one slice of the named GPU.
        product = slice_of.group(1)
        profile = slice_of.group(2).lower()
        migs = {**migs, profile: migs.get(profile, 0) + int(whole)}
        whole = 0.0
    if product:
        named, named_memory = gpu_model(product, catalog)
        return named, named_memory, migs, whole
    model, memory = placement_gpu_model(requirements, catalog)
    if model is None and migs:
        model, memory = mig_profile_model(migs, catalog)
    return model, memory, migs, whole


def effective_gpu_requests(pod_spec: dict[str, Any]) -> GpuRequests:
    """GPU and MIG requests of a pod as the scheduler counts them.

    Per resource: regular containers and sidecars (restartable init containers) add up; each
    ordinary init container runs alone beside the sidecars started before it; the pod needs the
    larger of the two.
    """
    result = GpuRequests()

    def container_requests(container: Any) -> dict[str, float]:
        amounts, malformed = _container_gpu_requests(container)
        result.malformed = result.malformed or malformed
        return amounts

    total: dict[str, float] = {}
    for container in as_list(pod_spec.get("containers")):
        _add(total, container_requests(container))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in as_list(pod_spec.get("initContainers")):
        amounts = container_requests(container)
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            _add(sidecars, amounts)
            _add(total, amounts)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, amounts)
        for name, amount in running.items():
            init_peak[name] = max(init_peak.get(name, 0.0), amount)
    for name in total.keys() | init_peak.keys():
        result.amounts[name] = max(total.get(name, 0.0), init_peak.get(name, 0.0))
    return result


def _container_gpu_requests(container: Any) -> tuple[dict[str, float], bool]:
    """GPU/MIG amounts one container asks for (limits, else requests), and whether any was bad.

    Extended resources cannot be overcommitted: the API server requires requests == limits and
    defaults requests to limits, so limits are the answer when given.
    """
    resources = as_mapping(as_mapping(container).get("resources"))
    limits, requests = as_mapping(resources.get("limits")), as_mapping(resources.get("requests"))
    amounts: dict[str, float] = {}
    malformed = False
    for name in limits.keys() | requests.keys():
        if not _is_gpu_resource(name):
            continue
        value = limits[name] if name in limits else requests[name]
        amount = gpu_quantity(value)
        if amount is None:
            malformed = True
        else:
            amounts[name] = amount
    return amounts, malformed


def _is_gpu_resource(name: Any) -> bool:
    return isinstance(name, str) and (
        name in (GPU_RESOURCE, AMD_GPU_RESOURCE)
        or (name.startswith(MIG_RESOURCE_PREFIX) and len(name) > len(MIG_RESOURCE_PREFIX))
    )


def _add(into: dict[str, float], amounts: Mapping[str, float]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + amount


def _mig_memory(profile: str) -> float:
    found = re.search(r"\.(\d+)gb", profile)
    return float(found.group(1)) if found else 0.0
