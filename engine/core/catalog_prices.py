"""Price quotes: one instance type's hourly list price in a region for a capacity, with what it
is based on, so a report can say "p5.48xlarge on-demand, us-east-1 list price (none for
eu-west-1)" or "spot: estimate, 60% off on-demand"."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.catalog_tables import DEFAULT_REGIONS, InstanceType, RegionPrices

CAPACITIES = ("on_demand", "spot")


@dataclass(frozen=True, slots=True)
class PriceQuote:
    instance_type: str
    capacity: str  # on_demand | spot
    usd_per_h: float
    region: str  # the region whose price this is
    requested_region: str | None  # the region asked for (None: the type's default)
    estimate: bool  # spot derived from on-demand and the cloud's default discount
    source: str
    as_of: str = ""
    discount_pct: float = 0.0  # a negotiated discount applied to the list price
    discount_source: str = ""

    @property
    def fallback(self) -> bool:
        """The price is another region's: the requested one has none in the catalog."""
        return self.requested_region is not None and self.requested_region != self.region

    @property
    def basis(self) -> str:
        """One line for a report's cost basis."""
        what = "spot" if self.capacity == "spot" else "on-demand"
        where = f"{self.region} list price"
        if self.fallback:
            where += f" (the catalog has none for {self.requested_region})"
        text = f"{self.instance_type} {what} ${self.usd_per_h:,.4g}/h, {where}"
        if self.discount_pct:  # the same words as Catalog.discount_note
            text += f" less a negotiated {self.discount_pct:g}% ({self.discount_source})"
        dated = f"{self.source}, {self.as_of}" if self.as_of else self.source
        return f"{text}; {dated}"


def _on_demand_region(spec: InstanceType, rows: RegionPrices, region: str | None) -> str | None:
    if region and region in rows and rows[region].on_demand is not None:
        return region
    default = DEFAULT_REGIONS.get(spec.cloud, "")
    if default in rows and rows[default].on_demand is not None:
        return default
    if spec.on_demand_usd_hr is not None:
        return None  # the type's own (curated or override) price
    priced = sorted(r for r, p in rows.items() if p.on_demand is not None)
    return priced[0] if priced else None


def on_demand_quote(spec: InstanceType, rows: RegionPrices,
                    region: str | None) -> PriceQuote | None:
    chosen = _on_demand_region(spec, rows, region)
    if chosen is not None:
        price = rows[chosen]
        assert price.on_demand is not None
        return PriceQuote(spec.name, "on_demand", price.on_demand, chosen, region, False,
                          price.source, price.as_of)
    if spec.on_demand_usd_hr is None:
        return None
    return PriceQuote(spec.name, "on_demand", spec.on_demand_usd_hr, spec.region, region, False,
                      spec.source, spec.as_of)


def quote(spec: InstanceType, rows: RegionPrices, region: str | None, capacity: str,
          spot_discount: float) -> PriceQuote | None:
    """Spot: the catalog's spot price in `region` (else in the region on-demand came from), else
    on-demand less the cloud's default discount, marked as an estimate."""
    on_demand = on_demand_quote(spec, rows, region)
    if capacity != "spot":
        return on_demand
    for where in (region, on_demand.region if on_demand else None):
        price = rows.get(where or "")
        if where and price is not None and price.spot is not None:
            return PriceQuote(spec.name, "spot", price.spot, where, region, False, price.source,
                              price.as_of)
    return estimated_spot(on_demand, spot_discount) if on_demand else None


def estimated_spot(on_demand: PriceQuote, spot_discount: float) -> PriceQuote:
    return PriceQuote(
        on_demand.instance_type, "spot", round(on_demand.usd_per_h * (1.0 - spot_discount), 6),
        on_demand.region, on_demand.requested_region, True,
        f"estimate: on-demand less the default spot discount ({spot_discount:.0%}); "
        f"on-demand from {on_demand.source}", on_demand.as_of)


def override_quote(spec: InstanceType, region: str | None, capacity: str,
                   spot_discount: float) -> PriceQuote | None:
    """A `--prices` override holds for every region."""
    if spec.on_demand_usd_hr is None:
        return None
    on_demand = PriceQuote(spec.name, "on_demand", spec.on_demand_usd_hr, region or spec.region,
                           region, False, spec.source)
    return estimated_spot(on_demand, spot_discount) if capacity == "spot" else on_demand
