"""Live facts at the runtime door: when a scanned region uses an EC2 instance type the built-in
catalog does not list (a type newer than the catalog), ask EC2 `DescribeInstanceTypes` for its
GPUs (`GpuInfo`), once per type per process (a run, or a warm Lambda: a type's hardware does not
change). The answers are the scan's `instance_types` section, so a snapshot replays them, and
the region's resources are normalized with them added to the catalog (a `--catalog` row wins).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.catalog_files import with_instance_types
from engine.core.catalog_tables import InstanceType
from engine.sources.aws.section import section

MAX_TYPES_PER_REGION = 64  # a region naming more unknown types is not a real estate
MAX_REMEMBERED = 1024
MAX_DEPTH = 8
LIVE_SOURCE = "ec2:DescribeInstanceTypes (live)"

_remembered: dict[str, dict[str, Any] | None] = {}
_lock = threading.Lock()


def catalog_knows(name: str) -> bool:
    """Whether the built-in catalog lists `name` (a SageMaker `ml.` type as its EC2 type)."""
    catalog = builtin_catalog()
    return catalog.knows(name) or (name.startswith("ml.") and catalog.knows(name[3:]))


def types_named(value: Any, depth: int = 0) -> Iterator[str]:
    """Every `InstanceType` / `instanceTypes` value in what the region's sections read."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "InstanceType" and isinstance(item, str):
                yield item
            elif key == "instanceTypes" and isinstance(item, list):
                yield from (t for t in item if isinstance(t, str))
            else:
                yield from types_named(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from types_named(item, depth + 1)


def _describe(client: Any, name: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        found = client.describe_instance_types(InstanceTypes=[name]).get("InstanceTypes") or []
    except ClientError as exc:
        if "InvalidInstanceType" in str(exc.response.get("Error", {}).get("Code", "")):
            return None  # EC2 does not know it either: a misspelt type stays unknown
        raise
    item = found[0] if found and isinstance(found[0], Mapping) else None
    if item is None:
        return None
    return {"InstanceType": str(item.get("InstanceType") or name),
            "VCpuInfo": item.get("VCpuInfo") or {}, "MemoryInfo": item.get("MemoryInfo") or {},
            "GpuInfo": item.get("GpuInfo") or {}}


def facts(client: Any, name: str) -> dict[str, Any] | None:
    """`DescribeInstanceTypes` for one type, remembered for the process."""
    with _lock:
        if name in _remembered:
            return _remembered[name]
        answer = _describe(client, name)
        if len(_remembered) >= MAX_REMEMBERED:
            _remembered.pop(next(iter(_remembered)))
        _remembered[name] = answer
        return answer


def read_instance_types(client: Any, scan: Mapping[str, Any]) -> list[dict[str, Any]]:
    unknown = sorted({t.removeprefix("ml.") for t in types_named(dict(scan))
                      if not catalog_knows(t)})[:MAX_TYPES_PER_REGION]
    return [found for name in unknown if (found := facts(client, name)) is not None]


def instance_type(item: Mapping[str, Any]) -> InstanceType | None:
    """A catalog row from one `DescribeInstanceTypes` item (CPU-only types: 0 GPUs)."""
    name = item.get("InstanceType")
    if not isinstance(name, str) or not name:
        return None
    gpus = [g for g in (item.get("GpuInfo") or {}).get("Gpus") or [] if isinstance(g, Mapping)]
    first = gpus[0] if gpus else {}
    model = " ".join(str(first.get(k) or "") for k in ("Manufacturer", "Name")).strip()
    memory_mib = (first.get("MemoryInfo") or {}).get("SizeInMiB") or 0
    vcpus = (item.get("VCpuInfo") or {}).get("DefaultVCpus")
    memory = (item.get("MemoryInfo") or {}).get("SizeInMiB")
    return InstanceType(
        cloud="aws", name=name, gpu_model=model,
        gpu_count=sum(int(g.get("Count") or 0) for g in gpus),
        gpu_memory_gib=float(memory_mib) / 1024, on_demand_usd_hr=None, region="",
        source=LIVE_SOURCE, vcpus=float(vcpus) if isinstance(vcpus, int | float) else None,
        memory_gib=float(memory) / 1024 if isinstance(memory, int | float) else None)


def learned_catalog(catalog: Catalog, scan: Mapping[str, Any]) -> Catalog:
    """`catalog` with the types the region's scan learned from EC2 that it does not list."""
    items = scan.get("instance_types")
    if not isinstance(items, list) or not items:
        return catalog
    learned = [spec for item in items if isinstance(item, Mapping)
               if (spec := instance_type(item)) is not None and not catalog.knows(spec.name)]
    return with_instance_types(catalog, learned, LIVE_SOURCE) if learned else catalog


# Not tried where the instances could not be read (a denied region stays "nothing read").
INSTANCE_TYPES = section("instance_types", "ec2", read_instance_types,
                         ["ec2:DescribeInstanceTypes"], needs="instances")
