"""Azure Retail Prices REST API (public, no credentials): Linux pay-as-you-go and spot prices of
virtual machine sizes per region, page after page through `NextPageLink`."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from engine.core.errors import InputError
from engine.pricing.http import get_page, json_page
from engine.pricing.rows import PriceRow

BASE_URL = "https://prices.azure.com/api/retail/prices"
SOURCE = "Azure Retail Prices API"
MAX_PAGES = 2000  # a region's VM prices are a few hundred pages of 100 items
MAX_PAGE_BYTES = 16 * 2**20
TIMEOUT_S = 30.0

Fetch = Callable[[str], bytes]


def azure_prices(regions: list[str], base_url: str = BASE_URL,
                 fetch: Fetch | None = None) -> list[PriceRow]:
    """Every VM size's hourly Linux price (on-demand and spot) in each of `regions`, in USD."""
    get = fetch or _http_get
    rows: list[PriceRow] = []
    for region in regions:
        rows.extend(_region_rows(region, _items(_first_url(base_url, region), base_url, get)))
    return rows


def _first_url(base_url: str, region: str) -> str:
    quoted = region.replace("'", "''")
    query = {"currencyCode": "USD",
             "$filter": f"serviceName eq 'Virtual Machines' and armRegionName eq '{quoted}' "
                        "and priceType eq 'Consumption'"}
    return f"{base_url}?{urllib.parse.urlencode(query)}"


def _items(url: str, base_url: str, get: Fetch) -> Iterator[dict[str, Any]]:
    next_url: str | None = url
    for _ in range(MAX_PAGES):
        if not next_url:
            return
        page = _page(get(next_url), next_url)
        yield from (item for item in page.get("Items") or [] if isinstance(item, dict))
        next_url = _next_link(page.get("NextPageLink"), base_url)
    raise InputError(f"Azure Retail Prices API: more than {MAX_PAGES} pages; give --region")


def _page(body: bytes, url: str) -> dict[str, Any]:
    return json_page(body, SOURCE, f"a JSON page for {url[:200]}")


def _next_link(link: object, base_url: str) -> str | None:
    """The next page, only on the API's own host (a page cannot send us elsewhere)."""
    if not isinstance(link, str) or not link:
        return None
    if urllib.parse.urlsplit(link).netloc != urllib.parse.urlsplit(base_url).netloc:
        raise InputError("Azure Retail Prices API: NextPageLink points to another host")
    return link


def _region_rows(region: str, items: Iterator[dict[str, Any]]) -> list[PriceRow]:
    on_demand: dict[str, tuple[float, str]] = {}
    spot: dict[str, tuple[float, str]] = {}
    for item in items:
        price = _linux_hourly_usd(item)
        if price is None:
            continue
        size = str(item.get("armSkuName"))[:256]
        date = str(item.get("effectiveStartDate") or "")[:10]
        spot_row = "Spot" in str(item.get("skuName") or "") or "Spot" in str(
            item.get("meterName") or "")
        (spot if spot_row else on_demand)[size] = (price, date)
    return [PriceRow("azure", size, region, _value(on_demand.get(size)), _value(spot.get(size)),
                     SOURCE, max((on_demand.get(size) or (0, ""))[1],
                                 (spot.get(size) or (0, ""))[1]))
            for size in sorted(on_demand.keys() | spot.keys())]


def _linux_hourly_usd(item: dict[str, Any]) -> float | None:
    text = " ".join(str(item.get(k) or "") for k in ("productName", "skuName", "meterName"))
    if ("Windows" in text or "Low Priority" in text or item.get("currencyCode") != "USD"
            or item.get("unitOfMeasure") != "1 Hour" or item.get("type") != "Consumption"
            or not item.get("armSkuName")):
        return None
    price = item.get("retailPrice")
    if isinstance(price, bool) or not isinstance(price, int | float):
        return None
    return float(price) if 0 <= price < 1e6 else None


def _value(found: tuple[float, str] | None) -> float | None:
    return None if found is None else found[0]


def _http_get(url: str) -> bytes:
    return get_page(url, SOURCE, max_bytes=MAX_PAGE_BYTES, timeout_s=TIMEOUT_S)
