"""Azure normalizers: Linux/Windows and legacy virtual machines, scale sets, managed disks, AKS
node pools. Managed disks are always platform-encrypted; the customer key is a disk encryption
set."""

from __future__ import annotations

from typing import Any

from engine.core.model import Capacity, Category, Resource
from engine.sources.terraform.attributes import AttrPath, Attrs
from engine.sources.terraform.build import new_resource, platform_encrypted_disk
from engine.sources.terraform.plan_index import PlannedChange
from engine.sources.terraform.readers import (
    any_key_set,
    mark_key,
    read_count,
    read_instance_type,
)
from engine.sources.terraform.registry import normalizer
from engine.sources.terraform.reservations import azure_reserved, reserved_or_spot

_AZURE_DISK_KEYS: tuple[AttrPath, ...] = (
    ("disk_encryption_set_id",),
    ("secure_vm_disk_encryption_set_id",),
)


def _priority_is_spot(attrs: Attrs) -> bool | None:
    if attrs.hidden("priority"):
        return False if attrs.left_to_provider("priority") else None
    return (attrs.text("priority") or "Regular").lower() == "spot"


def _azure_capacity(attrs: Attrs, unknown: set[str]) -> Capacity:
    return reserved_or_spot(azure_reserved(attrs), _priority_is_spot(attrs), unknown)


def _azure_machine(
    change: PlannedChange, category: Category, size_key: str, unknown: set[str], **fields: Any
) -> Resource:
    attrs = change.attrs
    return new_resource(
        change,
        category,
        "azure",
        unknown,
        instance_type=read_instance_type(attrs, unknown, size_key),
        tags=attrs.mapping("tags", unknown),
        region=attrs.text("location"),
        **fields,
    )


@normalizer("azurerm_linux_virtual_machine", "azurerm_windows_virtual_machine")
def _azurerm_virtual_machine(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    capacity = _azure_capacity(attrs, unknown)
    vm = _azure_machine(change, Category.INSTANCE, "size", unknown, capacity=capacity)
    disk = attrs.first("os_disk") or attrs.child("os_disk", 0)
    return [vm, platform_encrypted_disk(change, vm, "os_disk[0]", disk, *_AZURE_DISK_KEYS)]


@normalizer("azurerm_linux_virtual_machine_scale_set", "azurerm_windows_virtual_machine_scale_set")
def _azurerm_scale_set(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    scale_set = _azure_machine(
        change,
        Category.AUTOSCALING_GROUP,
        "sku",
        unknown,
        capacity=_azure_capacity(attrs, unknown),
        count=read_count(attrs, unknown, ("instances",)),
    )
    disk = attrs.first("os_disk") or attrs.child("os_disk", 0)
    return [
        scale_set,
        platform_encrypted_disk(change, scale_set, "os_disk[0]", disk, *_AZURE_DISK_KEYS),
    ]


@normalizer("azurerm_virtual_machine")
def _azurerm_legacy_virtual_machine(change: PlannedChange) -> list[Resource]:
    """The legacy VM resource: no spot option; its managed disks are platform-encrypted."""
    attrs, unknown = change.attrs, set[str]()
    vm = _azure_machine(change, Category.INSTANCE, "vm_size", unknown, capacity=Capacity.ON_DEMAND)
    os_disk = attrs.first("storage_os_disk") or attrs.child("storage_os_disk", 0)
    disks = [("storage_os_disk[0]", os_disk)]
    disks += [
        (f"storage_data_disk[{i}]", d) for i, d in enumerate(attrs.blocks("storage_data_disk"))
    ]
    return [vm, *(platform_encrypted_disk(change, vm, path, disk) for path, disk in disks)]


@normalizer("azurerm_managed_disk")
def _azurerm_managed_disk(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    return [
        new_resource(
            change,
            Category.VOLUME,
            "azure",
            unknown,
            encrypted=True,
            customer_key=mark_key(any_key_set(attrs, *_AZURE_DISK_KEYS), unknown),
            tags=attrs.mapping("tags", unknown),
            region=attrs.text("location"),
        )
    ]


@normalizer("azurerm_kubernetes_cluster_node_pool")
def _azurerm_kubernetes_node_pool(change: PlannedChange) -> list[Resource]:
    attrs, unknown = change.attrs, set[str]()
    autoscaled = attrs.flag("auto_scaling_enabled") or attrs.flag("enable_auto_scaling")
    counts: tuple[AttrPath, ...] = (("node_count",), ("min_count",))
    # Cost tags are the pool's `tags`; node labels (often computed: AKS adds its own) only add
    # what is already known and never make the tags unknown.
    labels = attrs.mapping("node_labels", set())
    return [
        new_resource(
            change,
            Category.NODE_GROUP,
            "azure",
            unknown,
            instance_type=read_instance_type(attrs, unknown, "vm_size"),
            capacity=_azure_capacity(attrs, unknown),
            count=read_count(attrs, unknown, *(counts[::-1] if autoscaled else counts)),
            tags={**labels, **attrs.mapping("tags", unknown)},
            billing_tags=attrs.mapping("tags", unknown),
            cluster=attrs.text("kubernetes_cluster_id"),
        )
    ]
