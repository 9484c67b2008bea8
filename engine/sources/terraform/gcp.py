"""Google Cloud normalizers: Compute Engine instances, instance templates and disks, GKE node
pools.

Labels: `terraform_labels`, then `effective_labels`, then `labels`. Machines with attached
`guest_accelerator`s get the accelerators' price only (the machine part is not in the catalog).
Disks are always platform-encrypted; the customer key is a KMS key.
"""

from __future__ import annotations

import re
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Capacity, Category, GpuSpec, Resource
from engine.sources.terraform.attributes import AttrPath, Attrs
from engine.sources.terraform.build import new_resource, platform_encrypted_disk
from engine.sources.terraform.plan_index import PlannedChange
from engine.sources.terraform.readers import (
    GPU_UNKNOWN,
    any_key_set,
    mark_key,
    merge_defaults,
    provider_region,
    read_count,
    read_instance_type,
)
from engine.sources.terraform.registry import normalizer
from engine.sources.terraform.reservations import gcp_reserved, gke_reserved, reserved_or_spot


def _gcp_labels(change: PlannedChange, unknown: set[str]) -> dict[str, str]:
    attrs = change.attrs
    for key in ("terraform_labels", "effective_labels"):
        if attrs.has(key) and not attrs.hidden(key):
            return attrs.mapping(key, unknown)
    own = attrs.mapping("labels", unknown)
    if not attrs.has("terraform_labels"):
        return own
    defaults = change.plan.provider_setting(change, "google", "default_labels")
    return merge_defaults(defaults, own, unknown)


def _gcp_region(change: PlannedChange) -> str | None:
    for key in ("region", "zone", "location"):
        value = change.attrs.text(key)
        if value:
            found = re.match(r"[a-z]+-[a-z]+\d+", value.rsplit("/", 1)[-1])
            return found.group(0) if found else value
    return provider_region(change, "google")


def _attached_gpus(
    attrs: Attrs, machine_type: str | None, unknown: set[str], catalog: Catalog
) -> tuple[GpuSpec | None, float | None]:
    """GPU spec and hourly price of attached `guest_accelerator`s; machine types with GPUs built
    in (a2, a3, g2) are left to the catalog."""
    if catalog.instance(machine_type) is not None:
        return None, None
    if attrs.hidden("guest_accelerator"):
        if not attrs.left_to_provider("guest_accelerator"):
            unknown.update(GPU_UNKNOWN)
        return None, None
    total, price = 0, 0.0
    model: str | None = None
    memory: float | None = None
    priced = True
    for accelerator in attrs.blocks("guest_accelerator"):
        count = accelerator.number("count")
        if count is None or accelerator.hidden("type"):
            unknown.update(GPU_UNKNOWN)
            continue
        if count == 0:
            continue
        total += count
        known = catalog.accelerator(accelerator.text("type"))
        if known is None or known.usd_hr_per_gpu is None:
            priced = False
        else:
            price += known.usd_hr_per_gpu * count
        if known is not None and model is None:
            model, memory = known.gpu_model, known.gpu_memory_gib
    if total == 0:
        return None, None
    return GpuSpec(model=model, count=float(total), memory_gib=memory), price if priced else None


def _scheduling_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("scheduling"):
        return False if attrs.left_to_provider("scheduling") else None
    scheduling = attrs.first("scheduling")
    if scheduling is None:
        return False
    model = (scheduling.text("provisioning_model") or "").upper()
    if model == "SPOT" or scheduling.flag("preemptible"):
        return True
    for key in ("provisioning_model", "preemptible"):
        if scheduling.hidden(key) and not scheduling.left_to_provider(key):
            return None
    return False


def _gcp_machine(
    change: PlannedChange, attrs: Attrs, unknown: set[str], category: Category, **fields: Any
) -> Resource:
    machine_type = read_instance_type(attrs, unknown, "machine_type")
    gpu, price = _attached_gpus(attrs, machine_type, unknown, change.catalog)
    return new_resource(
        change,
        category,
        "gcp",
        unknown,
        instance_type=machine_type,
        gpu=gpu,
        hourly_usd=price,
        **fields,
    )


_GCE_DISK_KEYS: tuple[AttrPath, ...] = (("kms_key_self_link",), ("disk_encryption_key_raw",))

_GCP_KEY_BLOCK: tuple[AttrPath, ...] = (
    ("disk_encryption_key", 0, "kms_key_self_link"),
    ("disk_encryption_key", 0, "raw_key"),
    ("disk_encryption_key", 0, "rsa_encrypted_key"),
)


def _gce_machine(change: PlannedChange, category: Category) -> Resource:
    """A GCE instance or instance template: both carry scheduling, reservation and labels."""
    attrs, unknown = change.attrs, set[str]()
    return _gcp_machine(
        change,
        attrs,
        unknown,
        category,
        capacity=reserved_or_spot(gcp_reserved(attrs), _scheduling_is_spot(attrs), unknown),
        tags=_gcp_labels(change, unknown),
        region=_gcp_region(change),
    )


@normalizer("google_compute_instance")
def _google_compute_instance(change: PlannedChange) -> list[Resource]:
    attrs = change.attrs
    instance = _gce_machine(change, Category.INSTANCE)
    boot = attrs.first("boot_disk") or attrs.child("boot_disk", 0)
    volumes = [platform_encrypted_disk(change, instance, "boot_disk[0]", boot, *_GCE_DISK_KEYS)]
    for position, disk in enumerate(attrs.blocks("attached_disk")):
        path = f"attached_disk[{position}]"
        volumes.append(platform_encrypted_disk(change, instance, path, disk, *_GCE_DISK_KEYS))
    return [instance, *volumes]


@normalizer("google_compute_instance_template", "google_compute_region_instance_template")
def _google_compute_instance_template(change: PlannedChange) -> list[Resource]:
    attrs = change.attrs
    template = _gce_machine(change, Category.LAUNCH_TEMPLATE)
    volumes = [
        platform_encrypted_disk(change, template, f"disk[{position}]", disk, *_GCP_KEY_BLOCK)
        for position, disk in enumerate(attrs.blocks("disk"))
    ]
    return [template, *volumes]


@normalizer("google_compute_disk", "google_compute_region_disk")
def _google_compute_disk(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        new_resource(
            change,
            Category.VOLUME,
            "gcp",
            unknown,
            encrypted=True,
            customer_key=mark_key(any_key_set(attrs, *_GCP_KEY_BLOCK), unknown),
            tags=_gcp_labels(change, unknown),
            region=_gcp_region(change),
        )
    ]


def _gke_node_is_spot(node: Attrs) -> bool | None:
    if node.flag("spot") or node.flag("preemptible"):
        return True
    for key in ("spot", "preemptible"):
        if node.hidden(key) and not node.left_to_provider(key):
            return None
    return False


def _gke_node_count(change: PlannedChange, unknown: set[str]) -> int:
    """Nodes of the pool: node_count (or the autoscaling minimum) per zone times its zones,
    else the autoscaling total minimum."""
    attrs = change.attrs
    autoscaling = attrs.child("autoscaling", 0)
    total_minimum = autoscaling.number("total_min_node_count")
    if attrs.number("node_count") is None and total_minimum is not None:
        return total_minimum
    per_zone = read_count(
        attrs,
        unknown,
        ("node_count",),
        ("autoscaling", 0, "min_node_count"),
        ("initial_node_count",),
    )
    return per_zone * _gke_zone_count(change, unknown)


# GKE spreads a regional cluster's nodes over three of the region's zones unless told otherwise.
_GKE_REGIONAL_DEFAULT_ZONES = 3
_REGION = re.compile(r"[a-z]+-[a-z]+\d+")


def _gke_cluster(change: PlannedChange) -> PlannedChange | None:
    """The google_container_cluster the pool's `cluster` refers to, when it is in the plan."""
    for reference in change.attrs.references("cluster"):
        parts = reference.split(".")
        if len(parts) >= 2 and parts[0] == "google_container_cluster":
            name = parts[1].split("[", 1)[0]
            found = change.plan.find(f"{change.module_prefix}google_container_cluster.{name}")
            if found is not None:
                return found
    return None


def _cluster_zones(cluster: Attrs) -> int:
    """Zones of a cluster's `node_locations`; a zonal cluster lists only the zones it adds to
    its own. 0 when it lists none."""
    zones = cluster.get("node_locations")
    if not isinstance(zones, list) or not zones:
        return 0
    location = cluster.text("location") or ""
    own_zone = location and not _REGION.fullmatch(location) and location not in zones
    return len(zones) + (1 if own_zone else 0)


def _gke_zone_count(change: PlannedChange, unknown: set[str]) -> int:
    """Zones the pool's per-zone node count applies to: its `node_locations`, else its
    cluster's, else three for a regional location and one for a zonal one."""
    cluster = _gke_cluster(change)
    holders = [change.attrs] + ([cluster.attrs] if cluster is not None else [])
    zones = change.attrs.get("node_locations")
    if isinstance(zones, list) and zones:
        return len(zones)
    if cluster is not None:
        found = _cluster_zones(cluster.attrs)
        if found:
            return found
    for attrs in holders:
        location = attrs.text("location")
        if location:
            return _GKE_REGIONAL_DEFAULT_ZONES if _REGION.fullmatch(location) else 1
    if any(a.hidden("location") and a.configured("location") is not False for a in holders):
        unknown.add("count")  # regional or zonal is not known yet
    return 1


_GKE_DEFAULT_MACHINE_TYPE = "e2-medium"


@normalizer("google_container_node_pool")
def _google_container_node_pool(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    common = {
        "count": _gke_node_count(change, unknown),
        "cluster": attrs.text("cluster"),
        "region": _gcp_region(change),
    }
    node = attrs.first("node_config")
    if node is None and (attrs.left_to_provider("node_config") or not attrs.hidden("node_config")):
        return [  # GKE's default node: e2-medium, no GPU, standard provisioning
            new_resource(
                change,
                Category.NODE_GROUP,
                "gcp",
                unknown,
                instance_type=_GKE_DEFAULT_MACHINE_TYPE,
                capacity=Capacity.ON_DEMAND,
                **common,
            )
        ]
    node = node or attrs.child("node_config", 0)
    labels = {**node.mapping("labels", unknown), **node.mapping("resource_labels", unknown)}
    return [
        _gcp_machine(
            change,
            node,
            unknown,
            Category.NODE_GROUP,
            capacity=reserved_or_spot(gke_reserved(attrs, node), _gke_node_is_spot(node), unknown),
            tags=labels,
            billing_tags=node.mapping("resource_labels", unknown),
            **common,
        )
    ]
