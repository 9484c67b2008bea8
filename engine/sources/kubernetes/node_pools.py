"""Karpenter NodePools (`karpenter.sh`): a node group that provisions GPU nodes, with the capacity
types its `karpenter.sh/capacity-type` requirement allows and the GPU its requirements pin.
"""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.kubernetes.crd_kinds import api_group
from engine.sources.kubernetes.gpu_models import placement_gpu_model
from engine.sources.kubernetes.objects import (
    PROVIDER,
    as_list,
    as_mapping,
    as_text,
    dig,
    first_wins,
    string_keys,
)
from engine.sources.kubernetes.placement import Term

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
_GPU_LIMITS = ("nvidia.com/gpu", "amd.com/gpu")
_GPU_REQUIREMENT_KEYS = frozenset({
    "karpenter.k8s.aws/instance-gpu-count", "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer", "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.azure.com/sku-gpu-count", "karpenter.azure.com/sku-gpu-name",
    "karpenter.azure.com/sku-gpu-manufacturer",
})
_GPU_CATEGORIES = frozenset({"g", "p"})  # EC2 instance categories that are all GPU
MAX_REQUIREMENTS = 64


def is_node_pool(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "NodePool" and api_group(obj) == "karpenter.sh"


def node_pool_resource(obj: dict[str, Any], *, catalog: Catalog | None, state: State,
                       cluster: str | None) -> Resource | None:
    """The node-group resource of a GPU NodePool; None when it provisions no GPU nodes.

    Its GPUs per node are at least one and how many nodes it makes is not known: `count` and
    `gpu.count` are marked unknown (a lower bound), so spot and tag verdicts still hold.
    """
    template = as_mapping(dig(obj, ("spec", "template")))
    requirements = _requirements(as_mapping(template.get("spec")))
    if not _provisions_gpus(obj, requirements):
        return None
    metadata = as_mapping(obj.get("metadata"))
    name = as_text(metadata.get("name")) or "<unnamed>"
    model, memory = placement_gpu_model([requirements], catalog or builtin_catalog())
    return Resource(
        provider=PROVIDER, kind="NodePool", category=Category.NODE_GROUP,
        id=f"NodePool/{name}", name=name, cluster=cluster,
        tags=first_wins(metadata.get("labels"), as_mapping(template.get("metadata")).get("labels")),
        annotations=first_wins(metadata.get("annotations")),
        count=1,
        gpu=GpuSpec(model=model, count=1.0, memory_gib=memory),
        capacity=_capacity(requirements),
        state=state,
        unknown=frozenset({"count", "gpu.count"}),
        raw=string_keys(obj),
    )


def _requirements(template_spec: dict[str, Any]) -> Term:
    term: Term = []
    for requirement in as_list(template_spec.get("requirements"))[:MAX_REQUIREMENTS]:
        requirement = as_mapping(requirement)
        key, operator = requirement.get("key"), requirement.get("operator")
        if isinstance(key, str) and isinstance(operator, str):
            values = tuple(v for v in as_list(requirement.get("values")) if isinstance(v, str))
            term.append((key, operator, values))
    return term


def _provisions_gpus(obj: dict[str, Any], requirements: Term) -> bool:
    limits = as_mapping(dig(obj, ("spec", "limits")))
    if any(name in limits for name in _GPU_LIMITS):
        return True
    for key, operator, values in requirements:
        if key in _GPU_REQUIREMENT_KEYS and operator in ("In", "Exists", "Gt"):
            return True
        if key == "karpenter.k8s.aws/instance-category" and operator == "In" and values and \
                set(values) <= _GPU_CATEGORIES:
            return True
    return False


def _capacity(requirements: Term) -> Capacity:
    """SPOT when capacity-type allows spot only; Karpenter's default (absent) is on-demand."""
    for key, operator, values in requirements:
        if key != CAPACITY_TYPE_LABEL:
            continue
        if operator == "In" and values and set(values) == {"spot"}:
            return Capacity.SPOT
        if operator == "NotIn" and {"on-demand", "reserved"} <= set(values):
            return Capacity.SPOT
    return Capacity.ON_DEMAND
