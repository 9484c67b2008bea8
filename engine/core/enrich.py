"""Fill a resource's GPU spec and list price from the catalog. Pure; adapters call it last."""

from __future__ import annotations

from engine.core.catalog import Catalog
from engine.core.model import GpuSpec, Resource


def enrich(resource: Resource, catalog: Catalog) -> Resource:
    """Return `resource` with `gpu` and `hourly_usd` completed from its instance type.

    Values the adapter already set win; an instance type the catalog does not know leaves the
    resource as it is (a non-GPU type, or one to add to the catalog).
    """
    spec = catalog.instance(resource.instance_type)
    if spec is None:
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
    if resource.hourly_usd is None and spec.on_demand_usd_hr is not None:
        updates["hourly_usd"] = spec.on_demand_usd_hr
    return resource.model_copy(update=updates)
