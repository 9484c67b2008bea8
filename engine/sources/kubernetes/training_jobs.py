"""Training-operator jobs (Kubeflow PyTorchJob and MPIJob, KubeRay RayJob): several pod templates
in one object, each with its replica count; one resource whose GPUs are summed over replica
specs × replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.kubernetes.facts import PodGroup, workload_facts
from engine.sources.kubernetes.gpu_requests import gpu_spec
from engine.sources.kubernetes.objects import (
    PROVIDER,
    as_list,
    as_mapping,
    as_text,
    controller_owner,
    count_field,
    dig,
    first_wins,
    string_keys,
    string_map,
)
from engine.sources.kubernetes.placement import workload_capacity

# Training-operator kinds with several pod templates: kind -> path of their replica specs.
_REPLICA_SPECS: dict[str, tuple[str, ...]] = {
    "PyTorchJob": ("spec", "pytorchReplicaSpecs"),
    "MPIJob": ("spec", "mpiReplicaSpecs"),
}
TRAINING_JOB_KINDS = frozenset({*_REPLICA_SPECS, "RayJob"})


def pod_groups(obj: dict[str, Any]) -> list[PodGroup]:
    """The pod templates of a training-operator job, each with its pod count.

    PyTorchJob / MPIJob: every `*ReplicaSpecs` entry (`replicas`, default 1). RayJob: the head
    group (one pod) and every worker group (`replicas`, else `minReplicas`, else 1, times
    `numOfHosts`). Entries without a readable template are skipped.
    """
    kind = obj.get("kind")
    if kind in _REPLICA_SPECS:
        specs = as_mapping(dig(obj, _REPLICA_SPECS[kind]))
        found = [_replica_group(spec, ("replicas",)) for spec in specs.values()]
    elif kind == "RayJob":
        cluster = as_mapping(dig(obj, ("spec", "rayClusterSpec")))
        head = as_mapping(cluster.get("headGroupSpec"))
        found = [_template_group(head.get("template"), 1, True)]
        for worker in as_list(cluster.get("workerGroupSpecs")):
            found.append(_replica_group(worker, ("replicas", "minReplicas"), hosts=True))
    else:
        return []
    return [group for group in found if group is not None]


def _replica_group(spec: Any, count_keys: tuple[str, ...], *, hosts: bool = False
                   ) -> PodGroup | None:
    spec = as_mapping(spec)
    pods, known = 1, True
    for key in count_keys:
        value, readable = count_field(spec, key)
        known = known and readable
        if value is not None:
            pods = value
            break
    if hosts:
        per_replica, readable = count_field(spec, "numOfHosts")
        known = known and readable
        pods *= 1 if per_replica is None else per_replica
    return _template_group(spec.get("template"), pods, known)


def _template_group(template: Any, pods: int, known: bool) -> PodGroup | None:
    template = as_mapping(template)
    spec = template.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        return None
    return PodGroup(as_mapping(template.get("metadata")), spec, pods, known)


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
        gpu, gpu_known, declared_known = gpu_spec(group.spec, annotations, catalog)
        if not gpu_known:
            unknown.add("gpu")
        if not declared_known:
            unknown.add("gpu.declared_memory_gib")
        if not group.pods_known:
            unknown.add("gpu")
        if gpu is not None:
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
