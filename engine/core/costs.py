"""Dollar estimates for findings: each policy names a method; each method states its basis and
the kind of money its figure is (`CostKind`), so that totals never add different kinds up.

One resource has one monthly spend (`resource_spend`): what it really costs as configured
(stopped: no compute; a template: nothing by itself; spot: the spot rate; × its count). Every
estimate about a resource starts from that spend, so the resource gets one price everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, NamedTuple

from engine.core.billing import BilledRates, billing_key
from engine.core.bounded import remember
from engine.core.catalog import HOURS_PER_MONTH, Catalog
from engine.core.model import Capacity, Category, Resource, State

CostKind = Literal["savings", "unallocated", "over_budget", "none"]


class Estimate(NamedTuple):  # a tuple: made for every finding, cheaper than a frozen dataclass
    monthly_usd: float
    basis: str
    kind: CostKind = "none"


class Spend(NamedTuple):
    """A resource's monthly spend as it runs; `monthly_usd` None when no price is known."""

    monthly_usd: float | None
    basis: str


Estimator = Callable[[Resource, Catalog, dict[str, Any]], Estimate]
ESTIMATORS: dict[str, Estimator] = {}
ESTIMATOR_KINDS: dict[str, CostKind] = {}
# An estimate from the resource's spend, whether its capacity is reserved, and the value of
# one detail (None when the rule reads none): nothing else, so `estimate` may remember it.
SpendRule = Callable[[Spend, bool, Any], Estimate]
SPEND_RULES: dict[str, tuple[SpendRule, str | None]] = {}  # method → rule, the detail it reads


def estimator(name: str, kind: CostKind = "none") -> Callable[[Estimator], Estimator]:
    def register(func: Estimator) -> Estimator:
        ESTIMATORS[name] = func
        ESTIMATOR_KINDS[name] = kind
        SPEND_RULES.pop(name, None)
        return func

    return register


def spend_estimator(name: str, kind: CostKind = "none",
                    detail: str | None = None) -> Callable[[SpendRule], SpendRule]:
    """Registers `rule` as the estimator `name`. It is given the resource's spend, whether its
    capacity is reserved, and the finding's `detail` (0.0 when it has none; None without a
    `detail`), so that `estimate` may remember its estimates by those."""
    def register(rule: SpendRule) -> SpendRule:
        def of_resource(resource: Resource, catalog: Catalog, details: dict[str, Any]
                        ) -> Estimate:
            return rule(*_rule_inputs(resource, catalog, details, detail))

        estimator(name, kind)(of_resource)
        SPEND_RULES[name] = (rule, detail)
        return rule

    return register


def _rule_inputs(resource: Resource, catalog: Catalog, details: dict[str, Any],
                 detail: str | None) -> tuple[Spend, bool, Any]:
    """What a spend rule is given: the resource's spend, whether its capacity is reserved, and
    the finding's `detail` (0.0 when it has none; None without a `detail`)."""
    return (resource_spend(resource, catalog), resource.capacity is Capacity.RESERVED,
            details.get(detail, 0.0) if detail else None)


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def hourly_price(resource: Resource, catalog: Catalog) -> tuple[float | None, str]:
    """On-demand $/h of one instance/replica: the list price, else its GPUs at catalog rates."""
    if resource.hourly_usd is not None:
        source = f"{resource.instance_type} list price" if resource.instance_type else "list price"
        return resource.hourly_usd, source + catalog.discount_note(
            resource.instance_type, resource.region, resource.hourly_usd)
    gpu = resource.gpu
    if gpu is None or not gpu.count:
        return None, "no price known"
    per_gpu = catalog.gpu_hourly(gpu.model)
    unlisted = _sold_without_list_price(resource.instance_type, catalog)
    if per_gpu is None:
        why = f"no list price for {resource.instance_type}, and " if unlisted else ""
        return None, f"{why}no catalog price for GPU model {gpu.model or 'unknown'}"
    basis = f"{gpu.count:g} × {gpu.model} at {_usd(per_gpu)}/GPU-h"
    if unlisted:
        basis = (f"no list price for {resource.instance_type}, estimated as {basis} (the "
                 "catalog's lowest rate for that GPU)")
    return per_gpu * gpu.count, basis


def _sold_without_list_price(instance_type: str | None, catalog: Catalog) -> bool:
    """A GPU type the catalog knows, with no list price in any region (one sold only through
    capacity blocks, a machine family newer than the price sources)."""
    return catalog.instance(instance_type) is not None \
        and catalog.hourly_price(instance_type) is None


def spot_discount(resource: Resource, catalog: Catalog) -> tuple[float, str]:
    """The share spot takes off this resource's on-demand price: the catalog's spot and
    on-demand prices of its type in its region where both are listed, else the cloud's
    typical discount (an estimate)."""
    memo = _RUN_MEMO.get()
    if memo is None:
        return _spot_discount(resource, catalog)
    key = (catalog, resource.instance_type, resource.region, resource.provider,
           _signed(resource.spot_hourly_usd), _signed(resource.hourly_usd))
    found = memo.discounts.get(key)
    if found is None:
        found = remember(memo.discounts, key, _spot_discount(resource, catalog), _MAX_DISCOUNTS)
    return found


def _spot_discount(resource: Resource, catalog: Catalog) -> tuple[float, str]:
    if resource.spot_hourly_usd is not None and resource.hourly_usd:
        market = resource.spot_hourly_usd
        discount = max(0.0, 1.0 - market / resource.hourly_usd)
        return discount, (f"spot discount {discount:.0%} ({resource.instance_type} spot market "
                          f"{_usd(market)}/h vs on-demand {_usd(resource.hourly_usd)}/h in "
                          f"{resource.region}, read live)")
    # only a GPU type's own prices: a GCE machine type with attached GPUs is priced with them
    gpu_type = catalog.instance(resource.instance_type)
    spot = catalog.hourly_price(gpu_type.name, resource.region, "spot") if gpu_type else None
    if spot is not None and not spot.estimate:
        on_demand = catalog.hourly_price(spot.instance_type, spot.region, "on_demand")
        if on_demand is not None and on_demand.region == spot.region and on_demand.usd_per_h > 0:
            discount = max(0.0, 1.0 - spot.usd_per_h / on_demand.usd_per_h)
            return discount, (f"spot discount {discount:.0%} ({spot.instance_type} spot "
                              f"{_usd(spot.usd_per_h)}/h vs on-demand "
                              f"{_usd(on_demand.usd_per_h)}/h in {spot.region})")
    discount = catalog.spot_discount(resource.provider)
    return discount, f"estimated spot discount {discount:.0%} ({resource.provider}, an estimate)"


def price_date(resource: Resource, catalog: Catalog) -> str | None:
    """The date of the catalog price of the resource's type in its region, when listed."""
    if not resource.instance_type:
        return None
    found = catalog.hourly_price(resource.instance_type, resource.region, "on_demand")
    return found.as_of or None if found is not None else None


def _no_compute(resource: Resource) -> str | None:
    """Why a resource has no compute spend of its own, or None when it has."""
    if resource.category is Category.LAUNCH_TEMPLATE:
        return "a template costs nothing by itself (priced through the groups that use it)"
    if resource.state is State.STOPPED:
        return "stopped: no compute spend (its volumes still cost)"
    if resource.count <= 0:
        return "desired size 0: no instances run"
    return None


class _RunMemo:
    """What one evaluation remembers of prices (`remembered_spend`): the last resource priced
    and its spend, and spot discounts and list spends by what they are computed from."""

    __slots__ = ("catalog", "discounts", "estimates", "list_spends", "resource", "spend")

    def __init__(self) -> None:
        self.resource: Resource | None = None
        self.catalog: Catalog | None = None
        self.spend = Spend(None, "")
        self.discounts: dict[tuple[Any, ...], tuple[float, str]] = {}
        self.list_spends: dict[tuple[Any, ...], Spend] = {}
        self.estimates: dict[tuple[Any, ...], Estimate] = {}

    def list_spend(self, resource: Resource, catalog: Catalog) -> Spend:
        """`_list_spend`, remembered by every field it reads: an estate repeats the same type,
        region, count and capacity thousands of times."""
        gpu = resource.gpu
        key = (catalog, resource.instance_type, resource.region, resource.provider,
               _signed(resource.hourly_usd), _signed(resource.spot_hourly_usd),
               gpu.model if gpu else None, _signed(gpu.count) if gpu else None,
               resource.capacity is Capacity.SPOT, resource.count, resource.count_basis)
        found = self.list_spends.get(key)
        if found is None:
            found = remember(self.list_spends, key, _list_spend(resource, catalog), _MAX_SPENDS)
        return found

    def estimate(self, method: str, resource: Resource, catalog: Catalog,
                 details: dict[str, Any]) -> Estimate:
        """`estimate` of a method with a spend rule, remembered by what the rule reads: the
        findings of one policy on alike resources have the same figure and basis."""
        rule, detail = SPEND_RULES[method]
        spend, reserved, value = _rule_inputs(resource, catalog, details, detail)
        if not spend.monthly_usd or (value is not None and type(value) is not float):
            # not remembered: a zero or unknown spend (0.0 and -0.0 are one key, yet print
            # apart), a detail that is no float (1 and True are one key, yet print apart)
            return _final(method, rule(spend, reserved, value), spend)
        key = (method, spend, reserved, _signed(value))
        found = self.estimates.get(key)
        if found is None:
            found = remember(self.estimates, key,
                             _final(method, rule(spend, reserved, value), spend), _MAX_ESTIMATES)
        return found


def _signed(value: float | None) -> object:
    """`value` as part of a key: 0.0 and -0.0 are equal, but print differently."""
    return value if value else repr(value)


_RUN_MEMO: ContextVar[_RunMemo | None] = ContextVar("gpuwarden_price_memo", default=None)
_MAX_DISCOUNTS = 4096  # types × regions × live prices: from input, so bounded
_MAX_SPENDS = 4096  # the same, × counts and GPU models
_MAX_ESTIMATES = 4096  # spends × methods × detail values


@contextmanager
def remembered_spend() -> Iterator[None]:
    """Within it (one evaluation), the spend of the resource priced last is remembered: an
    evaluation asks it of one resource about ten times in a row (each policy's estimate, the
    savings cap, the scanned spend). By identity, and only for the run: a changed copy
    (`model_copy(update=...)`) is another object, and nothing outlives the evaluation. Spot
    discounts and spends at list prices are remembered by everything they are computed from."""
    token = _RUN_MEMO.set(_RunMemo())
    try:
        yield
    finally:
        _RUN_MEMO.reset(token)


def resource_spend(resource: Resource, catalog: Catalog) -> Spend:
    """What the resource costs per month as configured: the one price every figure about it
    starts from (savings, unallocated spend, custom policies)."""
    memo = _RUN_MEMO.get()
    if memo is None:
        return _spend_of(resource, catalog)
    if memo.resource is not resource or memo.catalog is not catalog:
        memo.spend = _spend_of(resource, catalog)
        memo.resource, memo.catalog = resource, catalog
    return memo.spend


def _spend_of(resource: Resource, catalog: Catalog) -> Spend:
    reason = _no_compute(resource)
    if reason is not None:
        return Spend(0.0, reason)
    billed = _billed_spend(resource, catalog)
    if billed is not None:
        return billed
    memo = _RUN_MEMO.get()
    return _list_spend(resource, catalog) if memo is None else memo.list_spend(resource, catalog)


def _list_spend(resource: Resource, catalog: Catalog) -> Spend:
    """The spend of a running resource at its list (or estimated) price."""
    hourly, source = hourly_price(resource, catalog)
    if hourly is None:
        return Spend(None, source)
    basis = f"{source} {_usd(hourly)}/h"
    if resource.capacity is Capacity.SPOT:
        discount, why = spot_discount(resource, catalog)
        hourly *= 1.0 - discount
        basis += f" at the spot rate {_usd(hourly)}/h ({why})"
    count = f" × {resource.count}" if resource.count != 1 or resource.count_basis else ""
    if resource.count_basis:
        count += f" ({resource.count_basis})"
    return Spend(hourly * resource.count * HOURS_PER_MONTH, f"{basis}{count} × 730 h")


def _billed_spend(resource: Resource, catalog: Catalog) -> Spend | None:
    """The resource's spend at its billed rate, when the cost export (`--billing`) lists it:
    what it cost, spot, discounts and counts included."""
    if not catalog.billed:
        return None
    rate = catalog.billed.get(billing_key(resource.id))
    if rate is None:
        return _members_billed(resource, catalog.billed) if resource.members else None
    return Spend(rate.usd_per_h * HOURS_PER_MONTH,
                 f"billed {_usd(rate.usd_per_h)}/h (EffectiveCost in {rate.source}, "
                 f"{rate.window}) × 730 h")


def _members_billed(resource: Resource, billed: BilledRates) -> Spend | None:
    """A group's spend as the sum of its member instances' billed rates: an export lists the
    instances an autoscaling or node group runs, never the group."""
    members = tuple(dict.fromkeys(resource.members))
    rates = [rate for member in members
             if (rate := billed.get(billing_key(member))) is not None]
    if not rates:
        return None
    usd = sum(rate.usd_per_h for rate in rates)
    listed = str(len(rates)) if len(rates) == len(members) else f"{len(rates)} of {len(members)}"
    return Spend(usd * HOURS_PER_MONTH,
                 f"billed {_usd(usd)}/h (sum of {listed} member instances in {rates[0].source}, "
                 f"EffectiveCost {rates[0].window}) × 730 h")


def _unpriced(reason: str, kind: CostKind) -> Estimate:
    return Estimate(0.0, f"not priced: {reason}", kind)


def _share(spend: Spend, reserved: bool, rate: float, why: str) -> Estimate:
    """A saving of `rate` (0-1) of the resource's spend; none on reserved capacity, which is
    billed whether it runs or not (a capacity block, a reservation)."""
    if spend.monthly_usd is None:
        return _unpriced(spend.basis, "savings")
    if reserved:
        return Estimate(0.0, f"{spend.basis}; reserved capacity is billed either way: "
                             f"{why} saves nothing until the reservation is released", "savings")
    rate = min(1.0, max(0.0, rate))
    return Estimate(spend.monthly_usd * rate, f"{spend.basis} × {why}", "savings")


def _share_of(resource: Resource, catalog: Catalog, rate: float, why: str) -> Estimate:
    return _share(resource_spend(resource, catalog), resource.capacity is Capacity.RESERVED,
                  rate, why)


@estimator("none")
def no_cost(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    return Estimate(0.0, "no direct cost")


@spend_estimator("full")
def full_cost(spend: Spend, reserved: bool, _: None) -> Estimate:
    """The resource's whole spend, for context: no total adds it (kind `none`)."""
    if spend.monthly_usd is None:
        return _unpriced(spend.basis, "none")
    return Estimate(spend.monthly_usd, spend.basis)


@spend_estimator("unallocated-spend", kind="unallocated")
def unallocated_spend(spend: Spend, reserved: bool, _: None) -> Estimate:
    """The resource's whole spend, which has no owner: not a saving."""
    if spend.monthly_usd is None:
        return _unpriced(spend.basis, "unallocated")
    return Estimate(spend.monthly_usd, f"{spend.basis} with no owner", "unallocated")


@estimator("spot-savings", kind="savings")
def spot_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    if resource.capacity is Capacity.SPOT:
        return _share_of(resource, catalog, 0.0, "0% (already spot)")
    discount, why = spot_discount(resource, catalog)
    return _share_of(resource, catalog, discount, why)


@spend_estimator("offhours-share", kind="savings", detail="off_fraction")
def offhours_share(spend: Spend, reserved: bool, off_fraction: Any) -> Estimate:
    share = float(off_fraction)
    return _share(spend, reserved, share, f"off-hours share {share:.0%} of the week")


@spend_estimator("idle-share", kind="savings", detail="average_activity_pct")
def idle_share(spend: Spend, reserved: bool, average_activity_pct: Any) -> Estimate:
    """The GPU's price for the idle share of its time (100% − average activity)."""
    idle = max(0.0, 1.0 - float(average_activity_pct) / 100.0)
    return _share(spend, reserved, idle, f"idle share {idle:.0%}")


@estimator("mig-savings", kind="savings")
def mig_savings(resource: Resource, catalog: Catalog, details: dict[str, Any]) -> Estimate:
    fraction = details.get("mig_compute_fraction")
    if fraction is None:
        return _unpriced("no fitting MIG profile known yet", "savings")
    saved = 1.0 - float(fraction)
    return _share_of(resource, catalog, saved,
                     f"{saved:.0%} of the GPU freed by {details.get('mig_profile')}")


def cost_kind(method: str) -> CostKind:
    return ESTIMATOR_KINDS.get(method, "none")


def estimate(
    method: str, resource: Resource, catalog: Catalog, details: dict[str, Any]
) -> Estimate:
    """The method's estimate, its kind set from the method; a saving never exceeds the
    resource's spend (a stopped instance saves nothing by moving to spot)."""
    memo = _RUN_MEMO.get() if method in SPEND_RULES else None
    if memo is not None:
        return memo.estimate(method, resource, catalog, details)
    result = ESTIMATORS[method](resource, catalog, details)
    return _final(method, result, resource_spend(resource, catalog)
                  if ESTIMATOR_KINDS.get(method) == "savings" else None)


def _final(method: str, result: Estimate, spend: Spend | None) -> Estimate:
    """`result` rounded to cents, of the method's kind, a saving capped at `spend`."""
    kind = ESTIMATOR_KINDS.get(method, "none")  # `cost_kind`, without a call per finding
    usd = result.monthly_usd
    if kind == "savings" and spend is not None and spend.monthly_usd is not None \
            and usd > spend.monthly_usd:
        return Estimate(round(spend.monthly_usd, 2), f"{result.basis}, capped at its spend "
                                                     f"{_usd(spend.monthly_usd)}/month", kind)
    return Estimate(round(usd, 2), result.basis, kind)
