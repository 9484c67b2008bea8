"""Dollar estimates for findings: each policy names a method; each method states its basis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.catalog import HOURS_PER_MONTH, Catalog
from engine.core.model import Resource


@dataclass(frozen=True, slots=True)
class Estimate:
    monthly_usd: float
    basis: str


Estimator = Callable[[Resource, Catalog, dict[str, Any]], Estimate]
ESTIMATORS: dict[str, Estimator] = {}


def estimator(name: str) -> Callable[[Estimator], Estimator]:
    def register(func: Estimator) -> Estimator:
        ESTIMATORS[name] = func
        return func

    return register


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def hourly_price(resource: Resource, catalog: Catalog) -> tuple[float | None, str]:
    """On-demand $/h of one instance/replica: the list price, else its GPUs at catalog rates."""
    if resource.hourly_usd is not None:
        source = f"{resource.instance_type} list price" if resource.instance_type else "list price"
        return resource.hourly_usd, source
    gpu = resource.gpu
    if gpu is None or not gpu.count:
        return None, "no price known"
    per_gpu = catalog.gpu_hourly(gpu.model)
    if per_gpu is None:
        return None, f"no catalog price for GPU model {gpu.model or 'unknown'}"
    return per_gpu * gpu.count, f"{gpu.count:g} × {gpu.model} at {_usd(per_gpu)}/GPU-h"


def _monthly(resource: Resource, catalog: Catalog) -> tuple[float | None, str]:
    hourly, source = hourly_price(resource, catalog)
    if hourly is None:
        return None, source
    count = f" × {resource.count}" if resource.count != 1 else ""
    return hourly * resource.count * HOURS_PER_MONTH, f"{source} {_usd(hourly)}/h{count} × 730 h"


def _unpriced(reason: str) -> Estimate:
    return Estimate(0.0, f"not priced: {reason}")


@estimator("none")
def no_cost(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    return Estimate(0.0, "no direct cost")


@estimator("full")
def full_cost(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    monthly, basis = _monthly(resource, catalog)
    return _unpriced(basis) if monthly is None else Estimate(monthly, basis)


@estimator("spot-savings")
def spot_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    monthly, basis = _monthly(resource, catalog)
    if monthly is None:
        return _unpriced(basis)
    discount = catalog.spot_discount(resource.provider)
    return Estimate(
        monthly * discount,
        f"{basis} × estimated spot discount {discount:.0%} ({resource.provider}, an estimate)",
    )


@estimator("offhours-share")
def offhours_share(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    monthly, basis = _monthly(resource, catalog)
    if monthly is None:
        return _unpriced(basis)
    share = float(details.get("off_fraction", 0.0))
    return Estimate(monthly * share, f"{basis} × off-hours share {share:.0%} of the week")


@estimator("idle-share")
def idle_share(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    """The GPU's price for the idle share of its time (100% − average activity)."""
    monthly, basis = _monthly(resource, catalog)
    if monthly is None:
        return _unpriced(basis)
    activity = float(details.get("average_activity_pct", 0.0))
    idle = max(0.0, 1.0 - activity / 100.0)
    return Estimate(monthly * idle, f"{basis} × idle share {idle:.0%}")


@estimator("mig-savings")
def mig_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    monthly, basis = _monthly(resource, catalog)
    fraction = details.get("mig_compute_fraction")
    if monthly is None:
        return _unpriced(basis)
    if fraction is None:
        return _unpriced("no fitting MIG profile known yet")
    saved = 1.0 - float(fraction)
    return Estimate(
        monthly * saved,
        f"{basis} × {saved:.0%} of the GPU freed by {details.get('mig_profile')}",
    )


def estimate(
    method: str, resource: Resource, catalog: Catalog, details: dict[str, Any]
) -> Estimate:
    result = ESTIMATORS[method](resource, catalog, details)
    return Estimate(round(result.monthly_usd, 2), result.basis)
