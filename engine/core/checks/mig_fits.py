"""`mig-fits`: a workload on whole MIG-capable GPUs would fit a MIG slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog, MigProfile
from engine.core.checks.catalog_memo import CatalogMemo
from engine.core.checks.mig_capable import MIG_FAMILIES
from engine.core.conditions import Check, CheckArgs, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


class _MigArgs(CheckArgs):
    headroom_param: str = "headroom"
    max_fraction_param: str = "max_fraction"


def memory_need_gib(resource: Resource) -> float | None:
    """GPU memory the workload needs: declared, else observed by the adapter, else telemetry."""
    gpu = resource.gpu
    if gpu is None:
        return None
    if gpu.declared_memory_gib is not None:
        return gpu.declared_memory_gib
    if gpu.observed_peak_memory_gib is not None:
        return gpu.observed_peak_memory_gib
    return resource.telemetry.peak_memory_gib if resource.telemetry else None


_Fit = tuple[str | None, float | None, float, float, float]


def _smallest_fit(catalog: Catalog, fit: _Fit) -> MigProfile | None:
    """The smallest MIG profile of a GPU (model, memory) that holds a need (GiB, with headroom,
    within a fraction of the GPU)."""
    model, memory_gib, need, headroom, max_fraction = fit
    family = MIG_FAMILIES.get(catalog, (model, memory_gib))
    if family is None:
        return None
    return catalog.smallest_mig_fit(family, need, headroom, max_fraction)


_PROFILES: CatalogMemo[_Fit, MigProfile | None] = CatalogMemo(_smallest_fit)


@register_check
class MigFit(Check):
    key = "mig-fits"
    description = (
        "A workload holding whole MIG-capable GPUs needs (declared gpuwarden.io/gpu-memory or "
        "observed peak) no more than a MIG slice of at most max_fraction of the GPU, with headroom."
    )
    Args = _MigArgs

    def __init__(self, args: _MigArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.headroom = float(param_value(params, args.headroom_param, 0.2))
        self.max_fraction = float(param_value(params, args.max_fraction_param, 0.5))

    def profile(self, resource: Resource, ctx: EvalContext) -> MigProfile | None:
        need = memory_need_gib(resource)
        if need is None:
            return None
        gpu = resource.gpu
        return _PROFILES.get(ctx.catalog, (gpu.model if gpu else None,
                                           gpu.memory_gib if gpu else None, need,
                                           self.headroom, self.max_fraction))

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if memory_need_gib(resource) is None:
            return None
        return self.profile(resource, ctx) is not None

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        need = memory_need_gib(resource)
        if need is None:
            return {"unknown": ["gpu.declared_memory_gib", "telemetry.peak_memory_gib"]}
        profile = self.profile(resource, ctx)
        if profile is None:
            return {"memory_need_gib": need}
        return {
            "memory_need_gib": need,
            "mig_profile": profile.name,
            "mig_resource": profile.resource_name,
            "mig_compute_fraction": round(profile.compute_slices / 7, 4),
        }
