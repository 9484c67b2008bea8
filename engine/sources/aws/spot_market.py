"""The spot market of one scanned region, as its `spot_prices` section recorded it: each GPU
type's price is the median of its zones' latest prices. A price below a twentieth of the type's
on-demand list price is not a market price (spot discounts stop near 90%), nor is one above
one and a half times it: such a type keeps the typical discount."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog

FLOOR_SHARE_OF_ON_DEMAND = 0.05


def region_spot_prices(scan: Mapping[str, Any],
                       catalog: Catalog) -> dict[str, tuple[float, str]]:
    """Type → (the median of its zones' latest prices, the date of the newest) in this region,
    only prices a market could ask."""
    latest: dict[tuple[str, str], tuple[str, float]] = {}
    for item in scan.get("spot_prices") or []:
        if not isinstance(item, Mapping):
            continue
        price = _price(item.get("SpotPrice"))
        name, zone = item.get("InstanceType"), item.get("AvailabilityZone")
        stamp = str(item.get("Timestamp") or "")
        if price is None or not isinstance(name, str) or not isinstance(zone, str):
            continue
        if (name, zone) not in latest or stamp > latest[(name, zone)][0]:
            latest[(name, zone)] = (stamp, price)
    by_type: dict[str, list[tuple[str, float]]] = {}
    for (name, _), found in latest.items():
        by_type.setdefault(name, []).append(found)
    region = str(scan.get("region") or "")
    market = {name: (statistics.median(p for _, p in found), max(s for s, _ in found)[:10])
              for name, found in by_type.items()}
    return {name: quote for name, quote in market.items()
            if _plausible(catalog, name, region, quote[0])}


def _price(value: Any) -> float | None:
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if 0 < price < 10_000 else None


def _plausible(catalog: Catalog, name: str, region: str, price: float) -> bool:
    on_demand = catalog.hourly_price(name, region, "on_demand")
    if on_demand is None:
        return False
    return FLOOR_SHARE_OF_ON_DEMAND * on_demand.usd_per_h <= price <= on_demand.usd_per_h * 1.5
