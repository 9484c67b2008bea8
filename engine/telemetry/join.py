"""Attach GPU readings to the resources they belong to; the rest become "GPUs with no owner".

Each reading is joined by stable keys (docs/telemetry.md):

- its pod (`exported_pod`/`exported_namespace` first) → the owning Kubernetes workload
  (`engine.telemetry.owners`), when that workload holds GPUs;
- its host → Kubernetes node → cloud instance, or the host name read as an EC2/GCE name
  (`engine.telemetry.hosts`). A scanned instance gets every reading of its GPUs, whichever pod
  used them: its average is the machine's.

A reading that joins nothing is waste nobody owns: it becomes a resource of its own (provider
`telemetry`, kind `unowned_gpu`, category `instance`, running), priced from the node's instance
type or the GPU model's catalog rate, so `gpu-idle` judges and prices it like any GPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource, State, Telemetry
from engine.sources.kubernetes import GPU_PRODUCT_LABEL, gpu_model
from engine.telemetry.hosts import (
    INSTANCE_TYPE_LABELS,
    REGION_LABELS,
    HostResolver,
    node_label,
    node_provider_id,
)
from engine.telemetry.owners import OwnerIndex
from engine.telemetry.series import GpuSeries, drop_mig_parents

UNOWNED_PROVIDER = "telemetry"
UNOWNED_KIND = "unowned_gpu"
_MIB_PER_GIB = 1024.0
_COMPUTE_SLICES = 7  # A100, H100, H200: seven compute slices per GPU


@dataclass(frozen=True, slots=True)
class Join:
    """Where one reading went: the resources it was attached to (ids), or unowned."""

    reading: GpuSeries
    targets: tuple[str, ...]


@dataclass
class JoinResult:
    resources: list[Resource]
    unowned: list[Resource] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def join_readings(
    resources: Sequence[Resource],
    readings: Iterable[GpuSeries],
    *,
    catalog: Catalog,
    objects: Sequence[Mapping[str, Any]] = (),
    owners: Sequence[Mapping[str, Any]] = (),
    cluster: str | None = None,
    outage: str | None = None,
) -> JoinResult:
    """Resources with telemetry attached, plus one resource per GPU that joined nothing.

    `objects` are the scanned Kubernetes objects (Nodes, Pods, Jobs...), `owners` extra
    ownership objects (the telemetry section's, or pods listed live). `outage` says why a
    telemetry source gave nothing: GPU resources left without readings carry it as the reason
    they are unknown.
    """
    owner_index = OwnerIndex(resources, [*objects, *owners])
    hosts = HostResolver([o for o in objects if o.get("kind") == "Node"], resources)
    attached: dict[int, list[GpuSeries]] = {}
    unowned_groups: dict[tuple[str, str, str], list[GpuSeries]] = {}
    joins: list[Join] = []
    for reading in drop_mig_parents(readings):
        targets = _targets(reading, owner_index, hosts)
        for target in targets:
            attached.setdefault(id(target), []).append(reading)
        if not targets:
            unowned_groups.setdefault(reading.gpu_key(), []).append(reading)
        joins.append(Join(reading, tuple(t.id for t in targets)))
    updated = [
        with_readings(r, attached[id(r)], catalog) if id(r) in attached else r
        for r in resources
    ]
    if outage:
        updated = [_with_outage(r, outage) for r in updated]
    result = JoinResult(updated, joins=joins)
    stale = 0
    for group in unowned_groups.values():
        if all(reading.stale for reading in group):
            stale += 1  # a GPU that stopped reporting and nobody owns: most likely gone
            continue
        result.unowned.append(unowned_resource(group, hosts, catalog, cluster))
    if stale:
        result.warnings.append(f"telemetry: {stale} stale GPU series with no owner skipped")
    return result


def _targets(reading: GpuSeries, owners: OwnerIndex, hosts: HostResolver) -> list[Resource]:
    targets: list[Resource] = []
    workload = workload_of(reading, owners)
    if workload is not None:
        targets.append(workload)
    _, _, instance = hosts.resolve(reading.hostname)
    if instance is not None and instance is not workload:
        targets.append(instance)
    return targets


def workload_of(reading: GpuSeries, owners: OwnerIndex) -> Resource | None:
    """The GPU workload whose pod the reading names. A pod owned by a workload without GPUs
    (the exporter's own pod, when Prometheus did not keep the exporter's labels) does not
    count: the reading is then joined by its host."""
    if not reading.pod:
        return None
    namespace = reading.namespace or owners.namespace_of(reading.pod)
    if namespace is None:
        return None
    workload = owners.workload(namespace, reading.pod)
    if workload is None or not (workload.has_gpu or workload.is_unknown("gpu")):
        return None
    return workload


# ---------------------------------------------------------------------------- summarizing


def summarize(readings: Sequence[GpuSeries]) -> Telemetry:
    """One resource's telemetry from its GPUs' readings.

    The average is over the readings with the longest window (an instant reading does not
    dilute an hour of Prometheus data), weighted by samples. Readings with a problem count only
    when nothing better exists: then the first problem is the reason the average is missing.
    """
    peaks = [r.memory_used_mib for r in readings if r.memory_used_mib is not None]
    peak = round(max(peaks) / _MIB_PER_GIB, 3) if peaks else None
    good = [r for r in readings if r.activity_pct is not None and r.problem is None]
    if not good:
        problems = list(dict.fromkeys(r.problem for r in readings if r.problem))
        reason = problems[0] if problems else "no activity reading for its GPUs"
        if len(problems) > 1:
            reason += f" (and {len(problems) - 1} other problem(s))"
        window = max((r.window_seconds for r in readings), default=0)
        return Telemetry(samples=0, window_seconds=window, peak_memory_gib=peak, reason=reason)
    window = max(r.window_seconds for r in good)
    good = [r for r in good if r.window_seconds == window]
    weights = [max(r.samples, 1) for r in good]
    average = sum(r.activity_pct * w for r, w in zip(good, weights, strict=True)
                  if r.activity_pct is not None) / sum(weights)
    metrics = sorted({r.activity_metric for r in good if r.activity_metric})
    return Telemetry(
        average_activity_pct=average,
        metric=", ".join(metrics) or None,
        samples=sum(r.samples for r in good),
        window_seconds=window,
        peak_memory_gib=peak,
    )


def with_readings(resource: Resource, readings: Sequence[GpuSeries], catalog: Catalog
                  ) -> Resource:
    """The resource with its telemetry, observed peak memory, and the GPU model the readings
    name when the resource did not know it."""
    telemetry = summarize(readings)
    gpu = resource.gpu
    if gpu is not None:
        updates: dict[str, Any] = {}
        if telemetry.peak_memory_gib is not None:
            updates["observed_peak_memory_gib"] = telemetry.peak_memory_gib
        if gpu.model is None:
            model, memory = _model_of(readings, catalog)
            updates["model"] = model
            updates["memory_gib"] = gpu.memory_gib or memory
        gpu = gpu.model_copy(update=updates)
    return resource.model_copy(update={"telemetry": telemetry, "gpu": gpu})


def _model_of(readings: Sequence[GpuSeries], catalog: Catalog) -> tuple[str | None, float | None]:
    name = next((r.model for r in readings if r.model), None)
    model, memory = gpu_model(name, catalog) if name else (None, None)
    if memory is None:
        totals = [r.memory_total_mib for r in readings if r.memory_total_mib and not r.is_mig_slice]
        memory = round(max(totals) / _MIB_PER_GIB, 1) if totals else None
    return model, memory


def _with_outage(resource: Resource, outage: str) -> Resource:
    if resource.telemetry is not None or not resource.has_gpu or \
            resource.state is not State.RUNNING:
        return resource
    reason = f"telemetry unavailable: {outage}"
    return resource.model_copy(update={"telemetry": Telemetry(samples=0, reason=reason)})


# ---------------------------------------------------------------------------- GPUs nobody owns


def unowned_resource(readings: Sequence[GpuSeries], hosts: HostResolver, catalog: Catalog,
                     cluster: str | None) -> Resource:
    """A resource for one GPU (or MIG slice) whose readings joined no scanned resource."""
    first = readings[0]
    node, cloud, _ = hosts.resolve(first.hostname)
    product = node_label(node, GPU_PRODUCT_LABEL) if node is not None else None
    model, memory = _model_of(readings, catalog)
    if model is None and product:
        model, memory = gpu_model(product, catalog)
    instance_type = node_label(node, *INSTANCE_TYPE_LABELS) if node is not None else None
    per_gpu = _gpu_hourly(catalog, instance_type, model)
    share = _slice_share(catalog, model, memory, first.mig_profile) if first.is_mig_slice else 1.0
    capacity = _node_capacity(node)
    host = first.hostname or "unknown-host"
    device = first.uuid or (f"gpu{first.gpu}" if first.gpu is not None else f"pod-{first.pod}")
    slice_part = f"/mig-{first.mig_instance or first.mig_profile}" if first.is_mig_slice else ""
    name = f"GPU {first.gpu if first.gpu is not None else '?'} on {host}"
    if first.is_mig_slice:
        name += f" (MIG {first.mig_profile or 'slice'}"
        name += f" #{first.mig_instance})" if first.mig_instance is not None else ")"
    region = node_label(node, *REGION_LABELS) if node is not None else None
    return Resource(
        provider=UNOWNED_PROVIDER,
        kind=UNOWNED_KIND,
        category=Category.INSTANCE,
        id=f"{host}/{device}{slice_part}",
        name=name,
        region=region or (cloud.region if cloud is not None else None),
        cluster=cluster if node is not None else None,
        gpu=GpuSpec(
            model=model,
            count=0.0 if first.is_mig_slice else 1.0,
            memory_gib=memory,
            mig_profile=first.mig_profile,
            mig_count=1 if first.is_mig_slice else 0,
            observed_peak_memory_gib=summarize(readings).peak_memory_gib,
        ),
        capacity=capacity,
        state=State.RUNNING,
        hourly_usd=round(per_gpu * share, 6) if per_gpu is not None else None,
        telemetry=summarize(readings),
        unknown=frozenset({"capacity"}) if capacity is Capacity.UNKNOWN else frozenset(),
        raw={
            "node": (node.get("metadata") or {}).get("name") if node is not None else None,
            "provider_id": node_provider_id(node) if node is not None else None,
            "instance_type": instance_type,
            "pods": sorted({f"{r.namespace or '?'}/{r.pod}" for r in readings if r.pod}),
            "readings": [r.model_dump(mode="json", exclude_defaults=True) for r in readings],
        },
    )


def _node_capacity(node: Mapping[str, Any] | None) -> Capacity:
    if node is None:
        return Capacity.UNKNOWN
    from engine.sources.kubernetes import node_info

    return node_info(node).capacity


def _gpu_hourly(catalog: Catalog, instance_type: str | None, model: str | None) -> float | None:
    """$/h of one GPU: its node's instance type price per GPU, else the model's catalog rate."""
    spec = catalog.instance(instance_type)
    if spec is not None and spec.on_demand_usd_hr is not None and spec.gpu_count:
        return spec.on_demand_usd_hr / spec.gpu_count
    return catalog.gpu_hourly(model)


def _slice_share(catalog: Catalog, model: str | None, memory: float | None,
                 profile: str | None) -> float:
    """The share of its GPU a MIG slice holds: compute slices of seven."""
    family = catalog.mig_family(model, memory)
    for candidate in catalog.mig_profiles.get(family or "", []):
        if candidate.name == profile:
            return candidate.compute_slices / _COMPUTE_SLICES
    stated = re.match(r"(\d)g\.", profile or "")
    return int(stated.group(1)) / _COMPUTE_SLICES if stated else 1.0 / _COMPUTE_SLICES

