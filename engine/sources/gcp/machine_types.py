"""Live facts at the runtime door: when a scanned project runs a Compute Engine machine type the
catalog does not list (a type newer than the catalog; on an instance or in a GKE node pool), ask
`machineTypes.get` for its built-in accelerators, once per type per process (a type's hardware
does not change). The answers go into the snapshot's `gcp.machine_types`, so a replay reads the
same, and the estate is normalized with them added to the catalog (a `--catalog` row wins).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.catalog_files import with_instance_types
from engine.core.catalog_tables import InstanceType
from engine.sources.gcp.clients import GcpClients
from engine.sources.gcp.failures import describe_error
from engine.sources.gcp.gke import pool_machine_types
from engine.sources.gcp.normalizers import last_segment
from engine.sources.gcp.readers import ProjectEstate, plain

MAX_TYPES_PER_SCAN = 64  # an estate naming more unknown types is not a real estate
MAX_REMEMBERED = 1024
MAX_NAME = 64
LIVE_SOURCE = "compute:machineTypes.get (live)"

_remembered: dict[str, dict[str, Any] | None] = {}
_lock = threading.Lock()


def _unknown_types(estates: Iterable[ProjectEstate],
                   catalog: Catalog) -> dict[str, tuple[str, str]]:
    """Each machine type the catalog lacks → a (project, zone) that runs it."""
    found: dict[str, tuple[str, str]] = {}
    for estate in estates:
        running = [(last_segment(i.get("machineType")), last_segment(i.get("zone")))
                   for i in estate.instances] + pool_machine_types(estate.clusters)
        for name, zone in running:
            if name and zone and not catalog.knows(name) and name not in found:
                found[name] = (estate.project_id, zone)
    return dict(list(found.items())[:MAX_TYPES_PER_SCAN])


def _get(clients: GcpClients, project: str, zone: str, name: str) -> dict[str, Any] | None:
    from google.api_core.exceptions import NotFound

    try:
        answer = clients.machine_types.get(project=project, zone=zone, machine_type=name,
                                           retry=clients.retry)
    except NotFound:
        return None  # Compute Engine does not know it either: a misspelt type stays unknown
    item = plain(answer)
    return {"name": str(item.get("name") or name), "guestCpus": item.get("guestCpus"),
            "memoryMb": item.get("memoryMb"), "accelerators": item.get("accelerators") or []}


def facts(clients: GcpClients, project: str, zone: str, name: str) -> dict[str, Any] | None:
    """`machineTypes.get` for one type, remembered for the process."""
    with _lock:
        if name in _remembered:
            return _remembered[name]
        answer = _get(clients, project, zone, name)
        if len(_remembered) >= MAX_REMEMBERED:
            _remembered.pop(next(iter(_remembered)))
        _remembered[name] = answer
        return answer


def read_machine_types(clients: GcpClients, estates: list[ProjectEstate],
                       catalog: Catalog) -> tuple[list[dict[str, Any]], list[str]]:
    """The facts of every machine type the estate runs and the catalog lacks, with a warning
    for each that could not be asked (it stays unknown)."""
    items: list[dict[str, Any]] = []
    warnings: list[str] = []
    for name, (project, zone) in sorted(_unknown_types(estates, catalog).items()):
        try:
            found = facts(clients, project, zone, name)
        except Exception as exc:
            message, _ = describe_error(exc)
            warnings.append(f"gcp: machine type {name}: {message}; its GPUs stay unknown")
            continue
        if found is not None:
            items.append(found)
    return items, warnings


def instance_type(item: Mapping[str, Any], catalog: Catalog) -> InstanceType | None:
    """A catalog row from one MachineType (types without accelerators: 0 GPUs)."""
    name = item.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        return None
    accelerators = [a for a in item.get("accelerators") or [] if isinstance(a, Mapping)]
    first = catalog.accelerator(str(accelerators[0].get("guestAcceleratorType") or "")) \
        if accelerators else None
    model = first.gpu_model if first else (
        str(accelerators[0].get("guestAcceleratorType") or "") if accelerators else "")
    cpus, memory = item.get("guestCpus"), item.get("memoryMb")
    return InstanceType(
        cloud="gcp", name=name, gpu_model=model,
        gpu_count=float(sum(_count(a.get("guestAcceleratorCount")) for a in accelerators)),
        gpu_memory_gib=first.gpu_memory_gib if first and first.gpu_memory_gib else 0.0,
        on_demand_usd_hr=None, region="", source=LIVE_SOURCE,
        vcpus=float(cpus) if isinstance(cpus, int | float) else None,
        memory_gib=float(memory) / 1024 if isinstance(memory, int | float) else None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and 0 <= value <= 1024 else 0


def learned_catalog(catalog: Catalog, items: Any) -> Catalog:
    """`catalog` with the machine types a scan learned that it does not list."""
    if not isinstance(items, list) or not items:
        return catalog
    learned = [spec for item in items[:MAX_TYPES_PER_SCAN] if isinstance(item, Mapping)
               if (spec := instance_type(item, catalog)) is not None
               and not catalog.knows(spec.name)]
    return with_instance_types(catalog, learned, LIVE_SOURCE) if learned else catalog
