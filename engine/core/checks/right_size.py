"""`right-size`: a GPU instance with a smaller-memory sibling its peak memory fits, or a legacy
generation running training; and the `right-size-savings` estimator of its finding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import HOURS_PER_MONTH, Catalog, InstanceType
from engine.core.check_args import RightSizeArgs
from engine.core.checks.windows import window_shortfall
from engine.core.conditions import Check, EvalContext, param_value, register_check
from engine.core.costs import Estimate, estimator
from engine.core.durations import format_duration, parse_duration
from engine.core.model import Category, Resource, Telemetry
from engine.core.tristate import Tri

_HEADROOM = 0.8  # the sibling must hold the observed peak within 80% of its memory


def _either(first: Tri, second: Tri) -> Tri:
    """Kleene OR."""
    if first is True or second is True:
        return True
    return None if first is None or second is None else False


class RightSize(Check):
    key = "right-size"
    description = (
        "Over a telemetry window of at least `window_param`, peak GPU memory stayed under "
        "`threshold_param` percent of the GPU's memory on an instance type with a smaller-memory "
        "sibling in the catalog; or the type is a legacy generation with a newer equivalent "
        "(gpu_successors.csv) running training (a training job, or average activity of at least "
        "`busy_param` percent): a low-severity advisory."
    )
    Args = RightSizeArgs

    def __init__(self, args: RightSizeArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.window = parse_duration(param_value(params, args.window_param))
        self.threshold = float(param_value(params, args.threshold_param))
        self.busy = float(param_value(params, args.busy_param))

    def _why_undecided(self, telemetry: Telemetry | None) -> str | None:
        """Why the telemetry cannot decide ('' when there is none); None when it can."""
        if telemetry is None or telemetry.samples == 0:
            return ""
        return window_shortfall(telemetry, self.window)

    def _judged(self, telemetry: Telemetry | None) -> Telemetry | None:
        """The telemetry when it can decide: when `_why_undecided` gives no reason, without
        putting one into words."""
        if telemetry is None or telemetry.samples == 0 or telemetry.window_seconds < self.window:
            return None
        return telemetry

    # the two cases -----------------------------------------------------------------------

    def sibling_fits(self, resource: Resource, ctx: EvalContext) -> tuple[Tri, InstanceType | None]:
        sibling = ctx.catalog.smaller_sibling(resource.instance_type)
        memory = resource.gpu.memory_gib if resource.gpu else None
        if sibling is None or not memory:
            return False, None
        telemetry = self._judged(resource.telemetry)
        if telemetry is None or telemetry.peak_memory_gib is None:
            return None, sibling
        peak = telemetry.peak_memory_gib
        fits = peak < memory * self.threshold / 100 and peak <= sibling.gpu_memory_gib * _HEADROOM
        return fits, sibling

    def legacy_busy(self, resource: Resource, ctx: EvalContext) -> Tri:
        if ctx.catalog.newer_equivalent(resource.instance_type) is None:
            return False
        if resource.category is Category.TRAINING_JOB:
            return True
        telemetry = self._judged(resource.telemetry)
        if telemetry is None or telemetry.average_activity_pct is None:
            return None
        return telemetry.average_activity_pct >= self.busy

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        return _either(self.sibling_fits(resource, ctx)[0], self.legacy_busy(resource, ctx))

    # evidence ----------------------------------------------------------------------------

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        fits, sibling = self.sibling_fits(resource, ctx)
        if fits and sibling is not None:
            return _sibling_evidence(resource, ctx.catalog, sibling)
        if self.legacy_busy(resource, ctx):
            return _legacy_evidence(resource, ctx.catalog)
        why = self._why_undecided(resource.telemetry)
        return {"unknown": ["telemetry"], **({"telemetry_reason": why} if why else {}),
                "window": format_duration(self.window)}


def _sibling_evidence(resource: Resource, catalog: Catalog,
                      sibling: InstanceType) -> dict[str, Any]:
    telemetry = resource.telemetry
    assert telemetry is not None and telemetry.peak_memory_gib is not None
    peak = telemetry.peak_memory_gib
    memory = resource.gpu.memory_gib if resource.gpu else None
    return {
        "sibling": sibling.name,
        "sibling_memory_gib": sibling.gpu_memory_gib,
        "peak_memory_gib": round(peak, 2),
        "peak_memory_pct": round(100 * peak / memory, 1) if memory else None,
        "window": format_duration(telemetry.window_seconds),
        **_saving(resource, catalog, sibling.name),
    }


def _legacy_evidence(resource: Resource, catalog: Catalog) -> dict[str, Any]:
    successor = catalog.newer_equivalent(resource.instance_type)
    assert successor is not None
    return {
        "severity": "low",
        "newer_type": successor.newer_type,
        "reason": successor.reason,
        "successor_source": successor.source,
        **_saving(resource, catalog, successor.newer_type),
    }


def _saving(resource: Resource, catalog: Catalog, target: str) -> dict[str, Any]:
    """Monthly saving of moving `resource` to the `target` type (never negative)."""
    current = catalog.instance(resource.instance_type)
    other = catalog.instance(target)
    if current is None or other is None or current.on_demand_usd_hr is None \
            or other.on_demand_usd_hr is None:
        return {"monthly_saving_usd": 0.0,
                "saving_basis": f"not priced: no catalog price for {target}"}
    hourly = current.on_demand_usd_hr - other.on_demand_usd_hr
    monthly = max(0.0, hourly * resource.count * HOURS_PER_MONTH)
    count = f" × {resource.count}" if resource.count != 1 else ""
    return {
        "monthly_saving_usd": round(monthly, 2),
        "saving_basis": (f"{current.name} ${current.on_demand_usd_hr:,.2f}/h − {other.name} "
                         f"${other.on_demand_usd_hr:,.2f}/h{count} × 730 h"),
    }


@estimator("right-size-savings", kind="savings")
def right_size_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    saving = float(details.get("monthly_saving_usd") or 0.0)
    return Estimate(saving, str(details.get("saving_basis") or "no saving estimated"))


register_check(RightSize)
