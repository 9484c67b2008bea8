"""Fill a resource's GPU spec and list price from the catalog. Pure; adapters call it last."""

from __future__ import annotations

from engine.core.catalog import Catalog
from engine.core.model import GpuSpec, Resource

# Marked unknown on a resource whose instance type the catalog does not list (with "gpu"):
# its GPUs are not known, and the reason names the type (see `catalog_miss`).
CATALOG_MISS = "gpu.catalog"
# Marks a DRA claim a workload names that was not found (followed by "Kind namespace/name").
CLAIM_MISS_PREFIX = "gpu.claim:"
CLOUD_PROVIDERS = frozenset({"aws", "gcp", "azure"})


def enrich(resource: Resource, catalog: Catalog) -> Resource:
    """Return `resource` with `gpu` and `hourly_usd` completed from its instance type.

    Values the adapter already set win. A cloud resource whose instance type the catalog does
    not list (new or misspelt: the catalog lists CPU-only types too) gets its GPUs marked
    unknown, never "no GPU", unless the adapter read its GPUs itself.
    """
    name = resource.instance_type
    spec = catalog.instance(name)
    if spec is None:
        if name and _gpus_unread(resource) and not _listed(catalog, name):
            return resource.model_copy(
                update={"unknown": resource.unknown | {"gpu", CATALOG_MISS}})
        return resource
    gpu = resource.gpu or GpuSpec()
    updates: dict[str, object] = {
        "gpu": gpu.model_copy(
            update={
                "model": gpu.model or spec.gpu_model,
                "count": gpu.count if gpu.count is not None else float(spec.gpu_count),
                "memory_gib": gpu.memory_gib or spec.gpu_memory_gib,
            }
        )
    }
    if resource.hourly_usd is None:
        price = catalog.hourly_price(name, resource.region)
        if price is not None:
            updates["hourly_usd"] = price.usd_per_h
    return resource.model_copy(update=updates)


def _listed(catalog: Catalog, name: str) -> bool:
    """In the catalog; a SageMaker `ml.` type counts as its EC2 type (adapters price it so)."""
    return catalog.knows(name) or (name.startswith("ml.") and catalog.knows(name[3:]))


def _gpus_unread(resource: Resource) -> bool:
    return resource.provider in CLOUD_PROVIDERS and (
        resource.gpu is None or (resource.gpu.count is None and not resource.gpu.mig_count))


def claim_miss(resource: Resource) -> str | None:
    """Why a workload's GPUs are unknown when a DRA claim it names was not found: which."""
    claims = sorted(path.removeprefix(CLAIM_MISS_PREFIX) for path in resource.unknown
                    if path.startswith(CLAIM_MISS_PREFIX))
    if not claims:
        return None
    return (f"the DRA claim(s) it names were not found ({', '.join(claims)}), so how many GPUs "
            "it gets is not known")


def catalog_miss(resource: Resource) -> str | None:
    """Why a resource's GPUs are unknown when its type is not in the catalog, and how to fix it."""
    if CATALOG_MISS not in resource.unknown:
        return None
    return (f"instance type {resource.instance_type!r} is not in gpuwarden's catalog (new or "
            "misspelt?): add a row for it with --catalog FILE (the columns of "
            "engine/data/catalog/instance_types.csv)")
