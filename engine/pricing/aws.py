"""AWS prices: on-demand from the Price List Query API (`pricing:GetProducts`, AmazonEC2, Linux,
shared tenancy, no pre-installed software, capacity status Used) and spot from EC2
`DescribeSpotPriceHistory` (the latest price per zone, the median over the region's zones)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from engine.core.errors import InputError
from engine.pricing.rows import PriceRow

SOURCE = "AWS Price List Query API; EC2 DescribeSpotPriceHistory"
PRICING_REGION = "us-east-1"  # the Price List Query API's endpoint
MAX_PAGES = 200
MAX_PRICE_LIST_CHARS = 4 * 2**20


def aws_prices(regions: list[str], types: list[str], endpoint_url: str | None = None,
               now: datetime | None = None) -> list[PriceRow]:
    """Hourly Linux on-demand and spot prices of `types` in each of `regions`, in USD."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return _prices(regions, types, endpoint_url, now)
    except (BotoCoreError, ClientError) as exc:
        raise InputError(f"AWS price APIs: {exc}") from None


def _prices(regions: list[str], types: list[str], endpoint_url: str | None,
            now: datetime | None) -> list[PriceRow]:
    import boto3  # the SDK only when a refresh runs

    pricing = boto3.client("pricing", region_name=PRICING_REGION, endpoint_url=endpoint_url)
    rows: list[PriceRow] = []
    for region in regions:
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint_url)
        on_demand = _on_demand(pricing, region, types)
        today = now or datetime.now(UTC)
        spot = _spot(ec2, types, today)
        for name in sorted(on_demand.keys() | spot.keys()):
            price, as_of = on_demand.get(name, (None, today.date().isoformat()))
            rows.append(PriceRow("aws", name, region, price, spot.get(name), SOURCE, as_of))
    return rows


def _on_demand(client: Any, region: str, types: list[str]) -> dict[str, tuple[float, str]]:
    found: dict[str, tuple[float, str]] = {}
    for name in types:
        for text in _price_lists(client, region, name):
            parsed = _hourly_usd(text)
            if parsed is not None:
                found[name] = parsed
    return found


def _price_lists(client: Any, region: str, name: str) -> Iterator[str]:
    filters = [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in (
        ("instanceType", name), ("regionCode", region), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    pages = client.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1",
        PaginationConfig={"MaxItems": MAX_PAGES * 100})
    for page in pages:
        yield from (text for text in page.get("PriceList") or [] if isinstance(text, str))


def _hourly_usd(text: str) -> tuple[float, str] | None:
    """The hourly USD price in a PriceList entry's OnDemand terms, and its effective date."""
    if len(text) > MAX_PRICE_LIST_CHARS:
        raise InputError("AWS Price List Query API: a price list entry over 4 MiB")
    try:
        terms = json.loads(text).get("terms", {}).get("OnDemand", {})
    except (ValueError, AttributeError):
        return None
    for term in terms.values() if isinstance(terms, dict) else []:
        for dimension in (term.get("priceDimensions") or {}).values():
            usd = _price((dimension.get("pricePerUnit") or {}).get("USD"))
            if dimension.get("unit") == "Hrs" and usd:
                return usd, str(term.get("effectiveDate") or "")[:10]
    return None


def _price(value: object) -> float | None:
    """A price the API gave as a decimal string, None when it is not a plausible one."""
    try:
        price = float(str(value))
    except ValueError:
        return None
    return price if 0 <= price < 1e6 else None


def _spot(client: Any, types: list[str], now: datetime) -> dict[str, float]:
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for start in range(0, len(types), 100):
        pages = client.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=types[start:start + 100], ProductDescriptions=["Linux/UNIX"],
            StartTime=now, EndTime=now, PaginationConfig={"MaxItems": MAX_PAGES * 1000})
        for page in pages:
            for entry in page.get("SpotPriceHistory") or []:
                key = (str(entry.get("InstanceType")), str(entry.get("AvailabilityZone")))
                stamp, price = entry.get("Timestamp") or now, _price(entry.get("SpotPrice"))
                if price is not None and (key not in latest or latest[key][0] < stamp):
                    latest[key] = (stamp, price)
    by_type: dict[str, list[float]] = {}
    for (name, _zone), (_stamp, price) in latest.items():
        by_type.setdefault(name, []).append(price)
    return {name: statistics.median(prices) for name, prices in by_type.items()}
