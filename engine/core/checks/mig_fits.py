"""`mig-fits`: a workload on whole MIG-capable GPUs would fit a MIG slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import MigProfile
from engine.core.check_args import MigArgs
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.model import Resource
from engine.core.tristate import Tri


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


class MigFit(Check):
    key = "mig-fits"
    description = (
        "A workload holding whole MIG-capable GPUs needs (declared gpuwarden.io/gpu-memory or "
        "observed peak) no more than a MIG slice of at most max_fraction of the GPU, with headroom."
    )
    Args = MigArgs

    def __init__(self, args: MigArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.headroom = float(param_value(params, args.headroom_param, 0.2))
        self.max_fraction = float(param_value(params, args.max_fraction_param, 0.5))

    def profile(self, resource: Resource, ctx: EvalContext) -> MigProfile | None:
        need = memory_need_gib(resource)
        family = ctx.catalog.mig_family(resource.gpu.model if resource.gpu else None,
                                        resource.gpu.memory_gib if resource.gpu else None)
        if need is None or family is None:
            return None
        return ctx.catalog.smallest_mig_fit(family, need, self.headroom, self.max_fraction)

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


register_check(MigFit)
