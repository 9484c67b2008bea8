"""Compute Engine instances and disks of a `ProjectEstate` as `Resource` models (ids, kinds,
GPUs, capacity, state, labels and customer keys as the package docstring describes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.enrich import enrich
from engine.core.model import Capacity, Category, GpuSpec, Resource, State
from engine.sources.gcp.readers import ProjectEstate

INSTANCE_KIND = "google_compute_instance"
DISK_KIND = "google_compute_disk"
REGION_DISK_KIND = "google_compute_region_disk"
_RUNNING = frozenset({"PROVISIONING", "STAGING", "RUNNING", "REPAIRING"})
_STOPPED = frozenset({"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED"})


def last_segment(url: Any) -> str | None:
    """`.../zones/us-central1-a/machineTypes/a2-highgpu-1g` → `a2-highgpu-1g`."""
    return str(url).rstrip("/").rsplit("/", 1)[-1] if url else None


def resource_path(obj: Mapping[str, Any], project: str, collection: str) -> str:
    """`projects/P/zones/Z/instances/N` from the selfLink, else from project, zone and name."""
    link = str(obj.get("selfLink") or "")
    marker = link.find("/projects/")
    if marker >= 0:
        return link[marker + 1:]
    location = obj.get("zone") or obj.get("region")
    scope = "zones" if obj.get("zone") else "regions"
    return f"projects/{project}/{scope}/{last_segment(location)}/{collection}/{obj.get('name')}"


def zone_region(zone: str | None) -> str | None:
    """`us-central1-a` → `us-central1`."""
    if not zone:
        return None
    head, _, tail = zone.rpartition("-")
    return head if head and len(tail) == 1 else zone


def instance_state(status: Any) -> State:
    if status in _RUNNING:
        return State.RUNNING
    if status in _STOPPED:
        return State.STOPPED
    return State.UNKNOWN


def instance_capacity(instance: Mapping[str, Any]) -> Capacity:
    scheduling = instance.get("scheduling") or {}
    spot = str(scheduling.get("provisioningModel") or "").upper() == "SPOT" \
        or scheduling.get("preemptible") is True
    return Capacity.SPOT if spot else Capacity.ON_DEMAND


def attached_gpus(instance: Mapping[str, Any], machine_type: str | None,
                  catalog: Catalog) -> tuple[GpuSpec | None, float | None]:
    """GPU spec and hourly price of the attached accelerators; machine types with GPUs built in
    (a2, a3, g2) are left to the catalog."""
    if catalog.instance(machine_type) is not None:
        return None, None
    total, price, priced = 0, 0.0, True
    model: str | None = None
    memory: float | None = None
    for accelerator in instance.get("guestAccelerators") or []:
        count = int(accelerator.get("acceleratorCount") or 0)
        if count <= 0:
            continue
        total += count
        name = accelerator.get("acceleratorType")
        known = catalog.accelerator(name)
        if known is None or known.usd_hr_per_gpu is None:
            priced = False
        else:
            price += known.usd_hr_per_gpu * count
        if model is None:
            model = known.gpu_model if known else last_segment(name)
            memory = known.gpu_memory_gib if known else None
    if total == 0:
        return None, None
    return GpuSpec(model=model, count=float(total), memory_gib=memory), price if priced else None


def _labels(obj: Mapping[str, Any], key: str = "labels") -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.get(key) or {}).items()}


def instance_resource(instance: dict[str, Any], estate: ProjectEstate,
                      catalog: Catalog) -> Resource:
    machine_type = last_segment(instance.get("machineType"))
    gpu, price = attached_gpus(instance, machine_type, catalog)
    zone = last_segment(instance.get("zone"))
    resource = Resource(
        provider="gcp",
        kind=INSTANCE_KIND,
        category=Category.INSTANCE,
        id=resource_path(instance, estate.project_id, "instances"),
        name=str(instance.get("name") or ""),
        region=zone_region(zone),
        account=estate.project_id or None,
        tags=_labels(instance),
        namespace_labels=_labels(estate.project),
        instance_type=machine_type,
        gpu=gpu,
        hourly_usd=price,
        capacity=instance_capacity(instance),
        state=instance_state(instance.get("status")),
        raw=instance,
    )
    return enrich(resource, catalog)


def disk_customer_key(disk: Mapping[str, Any]) -> bool:
    """A Cloud KMS key (CMEK) or a customer-supplied key (CSEK, seen as its sha256)."""
    key = disk.get("diskEncryptionKey") or {}
    return bool(key.get("kmsKeyName") or key.get("sha256") or key.get("rsaEncryptedKey"))


def disk_resource(disk: dict[str, Any], estate: ProjectEstate,
                  instance_labels: Mapping[str, dict[str, str]]) -> Resource:
    users = [str(u) for u in disk.get("users") or []]
    inherited: dict[str, str] = {}
    for user in users:
        inherited = {**instance_labels.get(_path_of(user), {}), **inherited}
    regional = not disk.get("zone") and bool(disk.get("region"))
    location = last_segment(disk.get("region")) if regional else \
        zone_region(last_segment(disk.get("zone")))
    return Resource(
        provider="gcp",
        kind=REGION_DISK_KIND if regional else DISK_KIND,
        category=Category.VOLUME,
        id=resource_path(disk, estate.project_id, "disks"),
        name=str(disk.get("name") or ""),
        region=location,
        account=estate.project_id or None,
        tags={**inherited, **_labels(disk)},
        namespace_labels=_labels(estate.project),
        encrypted=True,
        customer_key=disk_customer_key(disk),
        state=State.RUNNING if users else State.STOPPED,
        raw=disk,
    )


def _path_of(link: str) -> str:
    marker = link.find("/projects/")
    return link[marker + 1:] if marker >= 0 else link


def compute_resources(estate: ProjectEstate, catalog: Catalog) -> list[Resource]:
    """The project's Compute Engine instances and disks (GKE pools: `gcp.gke`)."""
    instances = [instance_resource(i, estate, catalog) for i in estate.instances]
    labels = {r.id: r.tags for r in instances}
    return [*instances, *(disk_resource(d, estate, labels) for d in estate.disks)]


def project_labels(estate: ProjectEstate) -> dict[str, str]:
    return _labels(estate.project)
