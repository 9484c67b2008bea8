"""VMs, managed disks and AKS agent pools of a `SubscriptionEstate` as `Resource` models (ids,
kinds, capacity, state, tags and customer keys as the package docstring describes), and ARM ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.core.catalog import Catalog
from engine.core.enrich import enrich
from engine.core.model import Capacity, Category, Resource, State
from engine.sources.azure.readers import SubscriptionEstate

LINUX_VM_KIND = "azurerm_linux_virtual_machine"
WINDOWS_VM_KIND = "azurerm_windows_virtual_machine"
DISK_KIND = "azurerm_managed_disk"
NODE_POOL_KIND = "azurerm_kubernetes_cluster_node_pool"
_SPOT_PRIORITIES = frozenset({"spot", "low"})
_STOPPED_POWER = frozenset({"deallocated", "deallocating"})
_CUSTOMER_KEY_TYPES = frozenset({"encryptionatrestwithcustomerkey",
                                 "encryptionatrestwithplatformandcustomerkeys"})
_ARM_ID = re.compile(r"^/subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/"
                     r"providers/(?P<namespace>[^/]+)/(?P<type>[^/]+)/(?P<name>[^/]+)",
                     re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ArmId:
    subscription: str
    resource_group: str
    name: str


def parse_arm_id(resource_id: str) -> ArmId | None:
    found = _ARM_ID.match(resource_id)
    if found is None:
        return None
    return ArmId(found.group("subscription"), found.group("group"), found.group("name"))


def power_state(vm: Mapping[str, Any]) -> str | None:
    """`running`, `deallocated`, ... from the instance view's PowerState/* status."""
    view = (vm.get("properties") or {}).get("instanceView") or {}
    for status in view.get("statuses") or []:
        code = str(status.get("code") or "")
        if code.lower().startswith("powerstate/"):
            return code.split("/", 1)[1].lower()
    return None


def vm_state(vm: Mapping[str, Any]) -> State:
    power = power_state(vm)
    if power is None:
        return State.UNKNOWN
    return State.STOPPED if power in _STOPPED_POWER else State.RUNNING


def _tags(obj: Mapping[str, Any], key: str = "tags") -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.get(key) or {}).items()}


def _spot(priority: Any) -> Capacity:
    return Capacity.SPOT if str(priority or "").lower() in _SPOT_PRIORITIES else Capacity.ON_DEMAND


def vm_resource(vm: dict[str, Any], estate: SubscriptionEstate, catalog: Catalog) -> Resource:
    properties = vm.get("properties") or {}
    os_type = ((properties.get("storageProfile") or {}).get("osDisk") or {}).get("osType")
    resource = Resource(
        provider="azure",
        kind=WINDOWS_VM_KIND if str(os_type).lower() == "windows" else LINUX_VM_KIND,
        category=Category.INSTANCE,
        id=str(vm.get("id") or ""),
        name=str(vm.get("name") or ""),
        region=vm.get("location"),
        account=estate.subscription_id or None,
        tags=_tags(vm),
        namespace_labels=_tags(estate.subscription),
        instance_type=(properties.get("hardwareProfile") or {}).get("vmSize"),
        capacity=_spot(properties.get("priority")),
        state=vm_state(vm),
        raw=vm,
    )
    return enrich(resource, catalog)


def disk_customer_key(disk: Mapping[str, Any]) -> bool:
    properties = disk.get("properties") or {}
    encryption = properties.get("encryption") or {}
    security = properties.get("securityProfile") or {}
    return (str(encryption.get("type") or "").lower() in _CUSTOMER_KEY_TYPES
            or bool(encryption.get("diskEncryptionSetId"))
            or bool(security.get("secureVMDiskEncryptionSetId")))


def disk_resource(disk: dict[str, Any], estate: SubscriptionEstate,
                  vm_tags: Mapping[str, dict[str, str]]) -> Resource:
    manager = str(disk.get("managedBy") or "")
    attached = str((disk.get("properties") or {}).get("diskState") or "").lower() != "unattached"
    return Resource(
        provider="azure",
        kind=DISK_KIND,
        category=Category.VOLUME,
        id=str(disk.get("id") or ""),
        name=str(disk.get("name") or ""),
        region=disk.get("location"),
        account=estate.subscription_id or None,
        tags={**vm_tags.get(manager.lower(), {}), **_tags(disk)},
        namespace_labels=_tags(estate.subscription),
        encrypted=True,
        customer_key=disk_customer_key(disk),
        state=State.RUNNING if attached and manager else State.STOPPED,
        raw=disk,
    )


def node_pool_resources(cluster: dict[str, Any], estate: SubscriptionEstate,
                        catalog: Catalog) -> list[Resource]:
    properties = cluster.get("properties") or {}
    cluster_stopped = str((properties.get("powerState") or {}).get("code") or "") == "Stopped"
    found: list[Resource] = []
    for pool in properties.get("agentPoolProfiles") or []:
        count = int(pool.get("count") or 0)
        stopped = cluster_stopped or count == 0 or \
            str((pool.get("powerState") or {}).get("code") or "") == "Stopped"
        resource = Resource(
            provider="azure",
            kind=NODE_POOL_KIND,
            category=Category.NODE_GROUP,
            id=f"{cluster.get('id')}/agentPools/{pool.get('name')}",
            name=str(pool.get("name") or ""),
            region=cluster.get("location"),
            account=estate.subscription_id or None,
            cluster=str(cluster.get("name") or "") or None,
            tags={**_tags(cluster), **_tags(pool, "nodeLabels"), **_tags(pool)},
            billing_tags={**_tags(cluster), **_tags(pool)},
            namespace_labels=_tags(estate.subscription),
            instance_type=pool.get("vmSize"),
            count=count,
            capacity=_spot(pool.get("scaleSetPriority")),
            state=State.STOPPED if stopped else State.RUNNING,
            raw={"cluster": cluster.get("id"), "pool": pool},
        )
        found.append(enrich(resource, catalog))
    return found


def estate_resources(estates: Iterable[SubscriptionEstate], catalog: Catalog) -> list[Resource]:
    found: list[Resource] = []
    for estate in estates:
        vms = [vm_resource(vm, estate, catalog) for vm in estate.virtual_machines]
        tags = {vm.id.lower(): vm.tags for vm in vms}
        found.extend(vms)
        found.extend(disk_resource(disk, estate, tags) for disk in estate.disks)
        for cluster in estate.managed_clusters:
            found.extend(node_pool_resources(cluster, estate, catalog))
    return found
