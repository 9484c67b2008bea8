"""Workloads with several pod templates in one object (the `crd_kinds` registry: training
operators, Ray, LWS, JobSet, Volcano, KServe, Spark): one resource whose GPUs are summed over its
pod templates × their pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.kubernetes.crd_kinds import MULTI_TEMPLATE_KINDS, kind_entry
from engine.sources.kubernetes.dra import ClaimIndex, pod_claims
from engine.sources.kubernetes.facts import PodGroup, workload_facts
from engine.sources.kubernetes.gpu_requests import gpu_spec
from engine.sources.kubernetes.objects import (
    PROVIDER,
    as_mapping,
    as_text,
    controller_owner,
    first_wins,
    string_keys,
    string_map,
)
from engine.sources.kubernetes.placement import workload_capacity

# Every kind of the registry (`crd_kinds`): several pod templates in one object.
TRAINING_JOB_KINDS = MULTI_TEMPLATE_KINDS


def pod_groups(obj: dict[str, Any]) -> list[PodGroup]:
    """The pod templates of a registered multi-template kind, each with its pod count; [] for
    any other kind. Entries without a readable template are skipped."""
    entry = kind_entry(obj)
    return entry.pod_groups(obj) if entry is not None else []


def training_job_resource(
    obj: dict[str, Any],
    kind: str,
    groups: list[PodGroup],
    namespace_labels: Mapping[str, str] | None,
    *,
    catalog: Catalog | None,
    state: State,
    cluster: str | None,
    node_labels: Mapping[str, str] | None,
    namespace_network_policies: int | None,
    claims: ClaimIndex | None = None,
) -> Resource:
    """One resource for the whole job: its GPUs are every group's GPUs per pod × pods."""
    metadata = as_mapping(obj.get("metadata"))
    namespace = as_text(metadata.get("namespace")) or "default"
    name = as_text(metadata.get("name")) or as_text(metadata.get("generateName")) or "<unnamed>"
    annotations = first_wins(metadata.get("annotations"),
                             *(g.metadata.get("annotations") for g in groups))
    unknown: set[str] = set()
    specs: list[tuple[PodGroup, GpuSpec]] = []
    for group in groups:
        pod_claims_of = pod_claims(group.spec, namespace, claims)
        gpu, gaps = gpu_spec(group.spec, annotations, catalog, pod_claims_of)
        unknown |= gaps
        if gpu is not None:
            if not group.pods_known:
                unknown.add("gpu")
            specs.append((group, gpu))
    gpu_groups = [group for group, _ in specs] or groups
    workload = workload_facts(obj, gpu_groups, annotations, node_labels=node_labels,
                              namespace_network_policies=namespace_network_policies)
    if workload.shared_gpu is None:
        unknown.add("workload.shared_gpu")
    capacities = {workload_capacity(group.spec) for group in gpu_groups}
    return Resource(
        provider=PROVIDER,
        kind=kind,
        category=Category.WORKLOAD,
        id=f"{kind}/{namespace}/{name}",
        name=name,
        cluster=cluster,
        namespace=namespace,
        tags=first_wins(metadata.get("labels"), *(g.metadata.get("labels") for g in gpu_groups)),
        annotations=annotations,
        namespace_labels=string_map(namespace_labels),
        count=1,
        gpu=_summed_gpu(specs),
        capacity=capacities.pop() if len(capacities) == 1 else Capacity.ON_DEMAND,
        state=state,
        owner=controller_owner(metadata),
        workload=workload,
        unknown=frozenset(unknown),
        raw=string_keys(obj),
    )


def _summed_gpu(specs: list[tuple[PodGroup, GpuSpec]]) -> GpuSpec | None:
    """Every group's GPUs per pod × its pods; model and memory when the groups agree."""
    if not specs:
        return None
    whole = [gpu.count for _, gpu in specs]
    models = {(gpu.model, gpu.memory_gib) for _, gpu in specs if (gpu.count or 0) > 0}
    model, memory = models.pop() if len(models) == 1 else (None, None)
    profiles = [gpu.mig_profile for _, gpu in specs if gpu.mig_profile]
    return GpuSpec(
        model=model,
        count=None if None in whole else sum((gpu.count or 0.0) * g.pods for g, gpu in specs),
        memory_gib=memory,
        mig_profile=profiles[0] if len(set(profiles)) == 1 else None,
        mig_count=sum(gpu.mig_count * g.pods for g, gpu in specs),
        declared_memory_gib=specs[0][1].declared_memory_gib,
    )
