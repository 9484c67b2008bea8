"""Registered checks and cost estimators of the guardrail policies (policies/guardrails.yaml):
namespace selection, spot checkpointing, right-sizing and team budgets.

Imported by `engine.checks`, so registering happens whenever checks are loaded.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from engine.budget import load_budgets
from engine.catalog import HOURS_PER_MONTH, Catalog, InstanceType
from engine.conditions import Check, CheckArgs, EvalContext, param_value, register_check
from engine.costs import Estimate, estimator
from engine.durations import format_duration, parse_duration
from engine.model import Category, Resource, Telemetry
from engine.tristate import Tri

# ---------------------------------------------------------------------------- helpers


def _either(first: Tri, second: Tri) -> Tri:
    """Kleene OR."""
    if first is True or second is True:
        return True
    return None if first is None or second is None else False


# ---------------------------------------------------------------------------- namespaces


class _NamespaceArgs(CheckArgs):
    label: str
    value: str
    namespaces_param: str | None = "namespaces"


@register_check
class NamespaceSelected(Check):
    key = "namespace-selected"
    description = (
        "The resource's Kubernetes namespace carries the label `label` with value `value`, or is "
        "listed in the `namespaces_param` parameter."
    )
    Args = _NamespaceArgs

    def __init__(self, args: _NamespaceArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        listed = [] if args.namespaces_param is None else param_value(params, args.namespaces_param)
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            raise ValueError(f"parameter {args.namespaces_param!r} must be a list of names")
        self.namespaces = frozenset(listed)

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.namespace is None:
            return False
        labelled = resource.namespace_labels.get(self.args.label) == self.args.value
        return labelled or resource.namespace in self.namespaces


# ---------------------------------------------------------------------------- checkpoints


class _CheckpointArgs(CheckArgs):
    paths_param: str = "checkpoint_paths"


@register_check
class CheckpointMissing(Check):
    key = "checkpoint-missing"
    description = (
        "Interrupted work could not resume: a training job without a checkpoint location "
        "(SageMaker CheckpointConfig.S3Uri), or a Kubernetes workload with neither a "
        "gpuwarden.io/checkpoint annotation nor a persistent volume mounted at a path matching "
        "the `paths_param` globs."
    )
    Args = _CheckpointArgs

    def __init__(self, args: _CheckpointArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        globs = param_value(params, args.paths_param)
        if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
            raise ValueError(f"parameter {args.paths_param!r} must be a list of globs")
        self.globs = [g.lower() for g in globs]

    def matching_mounts(self, resource: Resource) -> list[str]:
        paths = resource.workload.volume_mount_paths if resource.workload else []
        return [p for p in paths if any(fnmatch.fnmatchcase(p.lower(), g) for g in self.globs)]

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if resource.is_unknown("checkpoint_uri"):
            return None
        if resource.checkpoint_uri:
            return False
        if resource.category is not Category.WORKLOAD:
            return True
        if resource.workload is None:
            return None  # a workload normalized without its Kubernetes facts
        return not (resource.workload.checkpoint or self.matching_mounts(resource))

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if resource.is_unknown("checkpoint_uri"):
            return {"unknown": ["checkpoint_uri"]}
        if resource.category is Category.WORKLOAD and resource.workload is None:
            return {"unknown": ["workload"]}
        mounts = resource.workload.volume_mount_paths if resource.workload else []
        return {"checkpoint_paths": self.globs, "persistent_mounts": mounts}


# ---------------------------------------------------------------------------- right-sizing


class _RightSizeArgs(CheckArgs):
    window_param: str = "window"
    threshold_param: str = "memory_threshold_pct"
    busy_param: str = "legacy_busy_pct"


_HEADROOM = 0.8  # the sibling must hold the observed peak within 80% of its memory


@register_check
class RightSize(Check):
    key = "right-size"
    description = (
        "Over a telemetry window of at least `window_param`, peak GPU memory stayed under "
        "`threshold_param` percent of the GPU's memory on an instance type with a smaller-memory "
        "sibling in the catalog; or the type is a legacy generation with a newer equivalent "
        "(gpu_successors.csv) running training (a training job, or average activity of at least "
        "`busy_param` percent): a low-severity advisory."
    )
    Args = _RightSizeArgs

    def __init__(self, args: _RightSizeArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.window = parse_duration(param_value(params, args.window_param))
        self.threshold = float(param_value(params, args.threshold_param))
        self.busy = float(param_value(params, args.busy_param))

    # telemetry ---------------------------------------------------------------------------

    def _why_undecided(self, telemetry: Telemetry | None) -> str | None:
        """Why the telemetry cannot decide ('' when there is none); None when it can."""
        if telemetry is None or telemetry.samples == 0:
            return ""
        if telemetry.window_seconds < self.window:
            return (f"its telemetry covers {format_duration(telemetry.window_seconds)}, less "
                    f"than the policy's {format_duration(self.window)} window")
        return None

    # the two cases -----------------------------------------------------------------------

    def sibling_fits(self, resource: Resource, ctx: EvalContext) -> tuple[Tri, InstanceType | None]:
        sibling = ctx.catalog.smaller_sibling(resource.instance_type)
        memory = resource.gpu.memory_gib if resource.gpu else None
        if sibling is None or not memory:
            return False, None
        telemetry = resource.telemetry
        if self._why_undecided(telemetry) is not None or telemetry is None \
                or telemetry.peak_memory_gib is None:
            return None, sibling
        peak = telemetry.peak_memory_gib
        fits = peak < memory * self.threshold / 100 and peak <= sibling.gpu_memory_gib * _HEADROOM
        return fits, sibling

    def legacy_busy(self, resource: Resource, ctx: EvalContext) -> Tri:
        if ctx.catalog.newer_equivalent(resource.instance_type) is None:
            return False
        if resource.category is Category.TRAINING_JOB:
            return True
        telemetry = resource.telemetry
        if self._why_undecided(telemetry) is not None or telemetry is None \
                or telemetry.average_activity_pct is None:
            return None
        return telemetry.average_activity_pct >= self.busy

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        return _either(self.sibling_fits(resource, ctx)[0], self.legacy_busy(resource, ctx))

    # evidence ----------------------------------------------------------------------------

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        fits, sibling = self.sibling_fits(resource, ctx)
        if fits and sibling is not None:
            return self._sibling_evidence(resource, ctx.catalog, sibling)
        legacy = self.legacy_busy(resource, ctx)
        if legacy:
            return self._legacy_evidence(resource, ctx.catalog)
        why = self._why_undecided(resource.telemetry)
        return {"unknown": ["telemetry"], **({"telemetry_reason": why} if why else {}),
                "window": format_duration(self.window)}

    def _sibling_evidence(self, resource: Resource, catalog: Catalog,
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

    def _legacy_evidence(self, resource: Resource, catalog: Catalog) -> dict[str, Any]:
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


@estimator("right-size-savings")
def right_size_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    saving = float(details.get("monthly_saving_usd") or 0.0)
    return Estimate(saving, str(details.get("saving_basis") or "no saving estimated"))


# ---------------------------------------------------------------------------- team budgets


class _BudgetArgs(CheckArgs):
    budgets_param: str = "budgets"
    file_param: str = "budgets_file"


@register_check
class OverBudget(Check):
    key = "over-budget"
    description = (
        "A team group (aggregate team-budget) is over its monthly budget: at runtime its "
        "projected run-rate exceeds it; in a plan, the change raises its planned run-rate and "
        "that exceeds it. Budgets come from the `budgets_param` mapping and the "
        "`file_param` file. Teams without a budget never fail."
    )
    Args = _BudgetArgs

    def __init__(self, args: _BudgetArgs, params: Mapping[str, Any]):
        super().__init__(args, params)
        self.budgets = load_budgets(param_value(params, args.budgets_param),
                                    param_value(params, args.file_param))

    def budget_of(self, resource: Resource) -> float | None:
        return self.budgets.get(resource.name.strip().lower())

    def _over(self, resource: Resource) -> bool:
        budget = self.budget_of(resource)
        raw = resource.raw
        monthly = float(raw.get("monthly_usd") or 0.0)
        rising = raw.get("door") != "plan" or float(raw.get("net_usd") or 0.0) > 0
        return budget is not None and monthly > budget and rising

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if self.budget_of(resource) is None:
            return False
        if self._over(resource):
            return True
        return None if resource.raw.get("unpriced") else False

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        budget = self.budget_of(resource)
        raw = resource.raw
        monthly = float(raw.get("monthly_usd") or 0.0)
        facts: dict[str, Any] = {
            "team": resource.name,
            "budget_usd": budget,
            "monthly_usd": monthly,
            "over_by_usd": round(max(0.0, monthly - (budget or 0.0)), 2) if budget is not None
            else 0.0,
            "top_resources": raw.get("top_resources") or [],
        }
        for key in ("previous_usd", "net_usd", "added_usd", "removed_usd"):
            if key in raw and raw.get("door") == "plan":
                facts[key] = raw[key]
        if raw.get("unpriced"):
            facts["unpriced"] = raw["unpriced"]
            if not self._over(resource):
                facts["unknown"] = ["members.hourly_usd"]
        return facts


@estimator("budget-overrun")
def budget_overrun(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    over = float(details.get("over_by_usd") or 0.0)
    monthly, budget = details.get("monthly_usd"), details.get("budget_usd")
    if budget is None:
        return Estimate(0.0, "no budget")
    return Estimate(over, f"run-rate ${float(monthly or 0):,.2f}/month − budget "
                          f"${float(budget):,.2f}/month")
