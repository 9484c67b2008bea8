"""What one evaluation remembers of prices (`costs.remembered_spend`) never changes a figure: a
resource's spend and the estimates made from it are, inside the memo, those computed afresh,
however many resources alike in all but one field came before them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import costs
from engine.core.billing import BilledRate
from engine.core.catalog import Catalog, builtin_catalog, with_billed_rates, with_price_overrides
from engine.core.costs import SPEND_RULES, Estimate, estimate, remembered_spend, resource_spend
from engine.core.model import Capacity, Category, GpuSpec, Resource, State

PRICES = "instance_type,on_demand_usd_hr,discount_pct\naws:p5.*,,25\n"
BILLED = {"i-billed": BilledRate(2.5, "2026-09-01 to 2026-10-01", "focus.csv")}


def _catalogs() -> list[Catalog]:
    base = builtin_catalog()
    return [base, with_price_overrides(base, PRICES, "edp.csv"),
            with_billed_rates(base, BILLED, "billed from focus.csv")]


CATALOGS = _catalogs()
# p5's on-demand price after the negotiated 25%: a resource listed at it says so in its basis
P5_NEGOTIATED = CATALOGS[1].hourly_price("p5.48xlarge", "us-east-1", "on_demand").usd_per_h
# Small pools of values, and resources that differ from the first in one field, for every
# field and value: a key that misses a field the spend depends on gives one of them the
# other's figure.
PRICES_USD = [None, 0.0, -0.0, 1.0, 3.5, 98.32, P5_NEGOTIATED]
POOLS: dict[str, list[Any]] = {
    "catalog": list(range(len(CATALOGS))),
    "provider": ["aws", "gcp", "azure", "kubernetes"],
    "category": [Category.INSTANCE, Category.NODE_GROUP, Category.LAUNCH_TEMPLATE],
    "id": ["i-1", "i-billed", "i-2"],
    "region": [None, "us-east-1", "eu-west-1", "us-central1"],
    "instance_type": [None, "p5.48xlarge", "g5.xlarge", "a2-highgpu-1g", "p4d.24xlarge",
                      "m5.xlarge", "gb-unknown.9xlarge"],
    "count": [0, 1, 2, 4],
    "count_basis": [None, "min size: 1"],
    "gpu": [None] + [GpuSpec(model=model, count=count)
                     for model in (None, "NVIDIA T4", "NVIDIA A100 80GB SXM", "NVIDIA H100")
                     for count in (None, 0.0, -0.0, 1.0, 2.0, 0.5)],
    "capacity": list(Capacity),
    "state": [State.RUNNING, State.STOPPED],
    "hourly_usd": PRICES_USD,
    "spot_hourly_usd": PRICES_USD,
}


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries({name: st.sampled_from(pool) for name, pool in POOLS.items()}))
def test_remembered_spends_are_the_spends_computed_afresh(fields: dict[str, Any]) -> None:
    priced = [_priced(fields)] + [_priced(fields | {name: value})
                                  for name, pool in POOLS.items() for value in pool]
    afresh = [resource_spend(resource, catalog) for catalog, resource in priced]
    with remembered_spend():
        remembered = [resource_spend(resource, catalog) for catalog, resource in priced]
    assert _exact(remembered) == _exact(afresh)


DETAIL_VALUES: list[Any] = [0.0, -0.0, 0.5, 3.0, 55.5, 91.0, 3, 250.0]


@settings(max_examples=25, deadline=None)
@given(st.fixed_dictionaries({name: st.sampled_from(pool) for name, pool in POOLS.items()}))
def test_remembered_estimates_are_the_estimates_made_afresh(fields: dict[str, Any]) -> None:
    priced = [_priced(fields)] + [_priced(fields | {name: value})
                                  for name, pool in POOLS.items() for value in pool]
    asked = [(method, catalog, resource, _details(detail, value))
             for method, (_, detail) in sorted(SPEND_RULES.items())
             for catalog, resource in priced for value in DETAIL_VALUES]
    afresh = [estimate(method, resource, catalog, details)
              for method, catalog, resource, details in asked]
    with remembered_spend():
        remembered = [estimate(method, resource, catalog, details)
                      for method, catalog, resource, details in asked]
    assert [_printed(e) for e in remembered] == [_printed(e) for e in afresh]


def test_an_estimator_registered_under_a_rules_name_replaces_the_rule() -> None:
    rule = SPEND_RULES["full"]
    plain, kind = costs.ESTIMATORS["full"], costs.ESTIMATOR_KINDS["full"]
    box = Resource(provider="aws", kind="aws_instance", category=Category.INSTANCE, id="i-1",
                   name="trainer", instance_type="p5.48xlarge", hourly_usd=98.32,
                   state=State.RUNNING)
    try:
        costs.estimator("full")(lambda resource, catalog, details: Estimate(1.0, "replaced"))
        with remembered_spend():
            assert resource_spend(box, CATALOGS[0]).monthly_usd  # a spend the memo would keep
            assert estimate("full", box, CATALOGS[0], {}) == Estimate(1.0, "replaced", "none")
    finally:
        costs.ESTIMATORS["full"], costs.ESTIMATOR_KINDS["full"] = plain, kind
        SPEND_RULES["full"] = rule


def _details(detail: str | None, value: Any) -> dict[str, Any]:
    return {"other": value} if detail is None else {detail: value}


def _printed(found: Any) -> tuple[str, str, str]:
    return repr(found.monthly_usd), found.basis, found.kind


def _priced(fields: dict[str, Any]) -> tuple[Catalog, Resource]:
    resource = {name: value for name, value in fields.items() if name != "catalog"}
    return CATALOGS[fields["catalog"]], Resource(kind="aws_instance", name="trainer", **resource)


def _exact(spends: list[Any]) -> list[tuple[str, str]]:
    """Spends as they print: 0.0 and -0.0 compare equal but are not the same output."""
    return [(repr(spend.monthly_usd), spend.basis) for spend in spends]
