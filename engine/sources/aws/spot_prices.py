"""Live spot prices at the runtime door: for the GPU instance types a scanned region runs, EC2
`DescribeSpotPriceHistory` (Linux/UNIX, the current price of each zone) gives the region's spot
price, the median over its zones. The answers are the scan's `spot_prices` section, so a snapshot
replays them, and each resource of that type carries the region's price (`spot_market`): spot
savings come from the market instead of the cloud's typical discount. A denied call leaves the
typical discount, labelled an estimate."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from engine.core.catalog import Catalog
from engine.sources.aws.instance_types import types_named
from engine.sources.aws.section import section

MAX_TYPES_PER_REGION = 64
MAX_PAGES = 20
PRODUCT = "Linux/UNIX"


def _gpu_types(scan: Mapping[str, Any], catalog: Catalog) -> list[str]:
    named = {t.removeprefix("ml.") for t in types_named(dict(scan))}
    return sorted(t for t in named if catalog.instance(t) is not None)[:MAX_TYPES_PER_REGION]


def read_spot_prices(client: Any, scan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The current spot price of each GPU type the region runs, per zone."""
    from engine.core.catalog import builtin_catalog

    types = _gpu_types(scan, builtin_catalog())
    if not types:
        return []
    pages = client.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=types, ProductDescriptions=[PRODUCT], StartTime=datetime.now(UTC),
        PaginationConfig={"MaxItems": MAX_PAGES * 1000, "PageSize": 1000})
    return [_item(entry) for page in pages for entry in page.get("SpotPriceHistory") or []
            if isinstance(entry, Mapping)]


def _item(entry: Mapping[str, Any]) -> dict[str, Any]:
    stamp = entry.get("Timestamp")
    return {"InstanceType": str(entry.get("InstanceType") or "")[:64],
            "AvailabilityZone": str(entry.get("AvailabilityZone") or "")[:64],
            "SpotPrice": str(entry.get("SpotPrice") or "")[:32],
            "Timestamp": stamp.isoformat() if isinstance(stamp, datetime) else str(stamp)[:40]}


# Not tried where the instances could not be read; a denied call leaves the typical discount.
SPOT_PRICES = section("spot_prices", "ec2", read_spot_prices,
                      ["ec2:DescribeSpotPriceHistory"], needs="instances")
