"""Live facts at the runtime door: when a scanned subscription runs a VM size the catalog does not
list (a size newer than the catalog), ask the Resource SKUs API for its GPU capabilities (the
`GPUs` capability), one listing per subscription and location, each size remembered for the
process (a size's hardware does not change). The answers go into the snapshot's
`azure.vm_sizes`, so a replay reads the same, and the estate is normalized with them added to
the catalog (a `--catalog` row wins). Sizes match case-insensitively, as Azure does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.catalog_files import with_instance_types
from engine.core.catalog_tables import InstanceType
from engine.sources.azure.clients import AzureClients
from engine.sources.azure.failures import describe_error
from engine.sources.azure.gpu_names import gpu_facts
from engine.sources.azure.readers import SubscriptionEstate, plain

MAX_SIZES_PER_SCAN = 64  # an estate naming more unknown sizes is not a real estate
MAX_SKUS_PER_LISTING = 20_000
MAX_REMEMBERED = 1024
MAX_NAME = 64
MAX_GPUS = 64
LIVE_SOURCE = "Microsoft.Compute/skus (live)"

_remembered: dict[str, dict[str, Any] | None] = {}
_lock = threading.Lock()


def _sizes_of(estate: SubscriptionEstate) -> Iterable[tuple[Any, Any]]:
    """(size, location) of every VM and AKS node pool."""
    for vm in estate.virtual_machines:
        size = ((vm.get("properties") or {}).get("hardwareProfile") or {}).get("vmSize")
        yield size, vm.get("location")
    for cluster in estate.managed_clusters:
        for pool in (cluster.get("properties") or {}).get("agentPoolProfiles") or []:
            yield pool.get("vmSize"), cluster.get("location")


def _unknown_sizes(estates: Iterable[SubscriptionEstate],
                   catalog: Catalog) -> dict[tuple[str, str], set[str]]:
    """(subscription, location) → the sizes there the catalog lacks (lower case)."""
    wanted: dict[tuple[str, str], set[str]] = {}
    seen: set[str] = set()
    for estate in estates:
        for size, location in _sizes_of(estate):
            if not isinstance(size, str) or not isinstance(location, str) or not size:
                continue
            key = size.lower()
            if key in seen or catalog.knows(size) or len(seen) >= MAX_SIZES_PER_SCAN:
                continue
            seen.add(key)
            wanted.setdefault((estate.subscription_id, location), set()).add(key)
    return wanted


def _gpu_sku(sku: Mapping[str, Any]) -> dict[str, Any]:
    capabilities = {str(c.get("name")): c.get("value") for c in sku.get("capabilities") or []
                    if isinstance(c, Mapping)}
    return {"name": str(sku.get("name")), "capabilities": {
        key: capabilities[key] for key in ("GPUs", "vCPUs", "MemoryGB") if key in capabilities}}


def _list(clients: AzureClients, subscription: str, location: str,
          sizes: set[str]) -> dict[str, dict[str, Any] | None]:
    found: dict[str, dict[str, Any] | None] = dict.fromkeys(sizes)
    listing = clients.compute(subscription).resource_skus.list(
        filter=f"location eq '{location}'")
    for position, sku in enumerate(listing):
        if position >= MAX_SKUS_PER_LISTING:
            break
        item = plain(sku)
        name = item.get("name")
        if item.get("resourceType") == "virtualMachines" and isinstance(name, str) \
                and name.lower() in found:
            found[name.lower()] = _gpu_sku(item)
    return found


def read_vm_sizes(clients: AzureClients, estates: list[SubscriptionEstate],
                  catalog: Catalog) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPU capabilities of every size the estate runs and the catalog lacks (a size the
    listing does not hold stays unknown), with a warning for each listing that failed."""
    items: list[dict[str, Any]] = []
    warnings: list[str] = []
    for (subscription, location), sizes in sorted(_unknown_sizes(estates, catalog).items()):
        with _lock:
            asked = sizes - _remembered.keys()
        if asked:
            try:
                answers = _list(clients, subscription, location, asked)
            except Exception as exc:
                message, _ = describe_error(exc)
                warnings.append(f"azure: VM sizes in {location}: {message}; their GPUs stay "
                                "unknown")
                continue
            with _lock:
                if len(_remembered) + len(answers) > MAX_REMEMBERED:
                    _remembered.clear()
                _remembered.update(answers)
        with _lock:
            items.extend(found for size in sorted(sizes)
                         if (found := _remembered.get(size)) is not None)
    return items, warnings


def _number(value: Any, top: float) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if 0 <= number <= top else None


def instance_type(item: Mapping[str, Any]) -> InstanceType | None:
    """A catalog row from one SKU's capabilities (no `GPUs` capability: 0 GPUs). The SKU API
    names no GPU model: the size's name does, for the series `gpu_names` knows."""
    name = item.get("name")
    capabilities = item.get("capabilities")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME \
            or not isinstance(capabilities, Mapping):
        return None
    gpus = _number(capabilities.get("GPUs"), MAX_GPUS) or 0.0
    model, memory = (gpu_facts(name) or ("", 0.0)) if gpus else ("", 0.0)
    return InstanceType(
        cloud="azure", name=name, gpu_model=model, gpu_count=gpus,
        gpu_memory_gib=memory, on_demand_usd_hr=None, region="", source=LIVE_SOURCE,
        vcpus=_number(capabilities.get("vCPUs"), 10_000),
        memory_gib=_number(capabilities.get("MemoryGB"), 1_000_000))


def learned_catalog(catalog: Catalog, items: Any) -> Catalog:
    """`catalog` with the VM sizes a scan learned that it does not list."""
    if not isinstance(items, list) or not items:
        return catalog
    learned = [spec for item in items[:MAX_SIZES_PER_SCAN] if isinstance(item, Mapping)
               if (spec := instance_type(item)) is not None and not catalog.knows(spec.name)]
    return with_instance_types(catalog, learned, LIVE_SOURCE) if learned else catalog
