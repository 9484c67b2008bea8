"""Cloud Billing Catalog API: Compute Engine's hourly vCPU, memory and GPU SKU prices per region,
composed into the price of each GPU machine type the catalog lists. (GPUs attached to N1 machines
keep the built-in per-GPU prices: a `--catalog` file prices machine types.)

Google prices a GPU machine by its parts: `vcpus` × the family's "Instance Core" SKU, memory GiB ×
its "Instance Ram" SKU, and each GPU's SKU ("Nvidia L4 GPU running in …"). Spot prices are the
`Preemptible` usage type of the same SKUs. A type whose parts are not all priced in a region gets
no price there (said on stderr by the caller), never a partial sum."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.core.catalog_tables import InstanceType
from engine.core.errors import InputError
from engine.pricing.http import get_page, json_page
from engine.pricing.rows import PriceRow

BASE_URL = "https://cloudbilling.googleapis.com"
COMPUTE_ENGINE_SERVICE = "6F81-5844-456A"
SOURCE = "Cloud Billing Catalog API"
MAX_PAGES = 100  # Compute Engine has some tens of thousands of SKUs, 5,000 to a page
MAX_PAGE_BYTES = 64 * 2**20
TIMEOUT_S = 60.0

Fetch = Callable[[str], bytes]
PartKey = tuple[str, str]  # ("core" | "ram", family) or ("gpu", SKU GPU name)

_MACHINE_PART = re.compile(r"^(?:Spot Preemptible )?(?P<family>[A-Z][A-Z0-9]*)(?: AMD| Arm)?"
                           r"(?: Predefined)? Instance (?P<part>Core|Ram) running in ")
_GPU_NAME = re.compile(r"^(?P<name>.+?)(?: GPU)? (?:running in|attached to) ")
_NOT_LIST_PRICES = ("Commitment", "Reserved", "Sole Tenancy")
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}

# The catalog's GPU model → the name Compute Engine's GPU SKUs give it.
_SKU_GPU_NAMES = {
    "NVIDIA T4": "nvidia tesla t4", "NVIDIA V100": "nvidia tesla v100",
    "NVIDIA P100": "nvidia tesla p100", "NVIDIA P4": "nvidia tesla p4",
    "NVIDIA K80": "nvidia tesla k80", "NVIDIA A100 40GB": "nvidia tesla a100",
    "NVIDIA A100 80GB": "nvidia tesla a100 80gb", "NVIDIA L4": "nvidia l4",
    "NVIDIA H100 80GB": "nvidia h100 80gb", "NVIDIA H200 141GB": "nvidia h200 141gb",
    "NVIDIA B200": "nvidia b200", "NVIDIA RTX PRO 6000 Blackwell": "rtx 6000 96gb",
}
_MEGA_H100 = "nvidia h100 80gb mega"


@dataclass(frozen=True, slots=True)
class PartPrice:
    usd_per_unit: float
    as_of: str


@dataclass
class RegionParts:
    """The priced parts of one region: on-demand and spot, by part key."""

    on_demand: dict[PartKey, PartPrice]
    spot: dict[PartKey, PartPrice]


def gcp_prices(regions: list[str], specs: Iterable[InstanceType], api_key: str,
               base_url: str = BASE_URL, fetch: Fetch | None = None) -> list[PriceRow]:
    """The hourly on-demand and spot price of each GPU machine type in `specs`
    in each of `regions`, in USD, composed from Compute Engine's SKUs."""
    if not api_key:
        raise InputError("the Cloud Billing Catalog API needs an API key: set "
                         "GPUWARDEN_GCP_API_KEY (https://cloud.google.com/docs/authentication/"
                         "api-keys)")
    parts = region_parts(_skus(base_url, api_key, fetch or _http_get), set(regions))
    rows: list[PriceRow] = []
    for spec in specs:
        for region in regions:
            row = _priced(spec, region, parts.get(region))
            if row is not None:
                rows.append(row)
    return rows


def region_parts(skus: Iterable[dict[str, Any]], regions: set[str]) -> dict[str, RegionParts]:
    """The compute part prices of `skus` for each of `regions`."""
    parts = {region: RegionParts({}, {}) for region in regions}
    for sku in skus:
        read = _part_of(sku)
        if read is None:
            continue
        key, spot, price = read
        for region in _regions_of(sku):
            if region in parts:
                side = parts[region].spot if spot else parts[region].on_demand
                side.setdefault(key, price)
    return parts


def _part_of(sku: dict[str, Any]) -> tuple[PartKey, bool, PartPrice] | None:
    category = sku.get("category")
    if not isinstance(category, dict):
        return None
    usage = category.get("usageType")
    if category.get("resourceFamily") != "Compute" or usage not in ("OnDemand", "Preemptible"):
        return None
    key = _part_key(str(sku.get("description") or "")[:300], category.get("resourceGroup"))
    if key is None:
        return None
    price = _hourly_price(sku.get("pricingInfo"), _UNITS[key[0]])
    return None if price is None else (key, usage == "Preemptible", price)


def _part_key(description: str, group: object) -> PartKey | None:
    if description.startswith(_NOT_LIST_PRICES) or "Custom" in description:
        return None
    if group == "GPU":
        gpu = _GPU_NAME.match(description)
        return ("gpu", gpu["name"].lower()) if gpu else None
    machine = _MACHINE_PART.match(description)
    if machine is None or group not in ("CPU", "RAM", "N1Standard"):
        return None
    return ("core" if machine["part"] == "Core" else "ram", machine["family"].lower())


def _hourly_price(pricing: object, unit: str) -> PartPrice | None:
    if not isinstance(pricing, list) or not pricing or not isinstance(pricing[0], dict):
        return None
    info = pricing[0]
    expression = info.get("pricingExpression")
    if not isinstance(expression, dict) or expression.get("usageUnit") != unit:
        return None
    rates = [_usd(rate.get("unitPrice")) for rate in expression.get("tieredRates") or []
             if isinstance(rate, dict)]
    priced = [rate for rate in rates if rate]
    if not priced:
        return None
    return PartPrice(priced[0], str(info.get("effectiveTime") or "")[:10])


def _usd(money: object) -> float | None:
    if not isinstance(money, dict) or money.get("currencyCode", "USD") != "USD":
        return None
    try:
        value = int(money.get("units") or 0) + int(money.get("nanos") or 0) / 1e9
    except (TypeError, ValueError):
        return None
    return value if 0 < value < 10_000 else None


def _regions_of(sku: dict[str, Any]) -> list[str]:
    regions = sku.get("serviceRegions")
    return [r for r in regions[:200] if isinstance(r, str)] if isinstance(regions, list) else []


def _priced(spec: InstanceType, region: str, parts: RegionParts | None) -> PriceRow | None:
    if parts is None or not spec.gpu_count:
        return None
    needed = _parts_needed(spec)
    if needed is None:
        return None
    on_demand = _sum(needed, parts.on_demand)
    spot = _sum(needed, parts.spot)
    if on_demand is None and spot is None:
        return None
    dates = [parts.on_demand[key].as_of for key, _ in needed if key in parts.on_demand]
    return PriceRow("gcp", spec.name, region, on_demand, spot, SOURCE,
                    max(dates, default=""))


def _parts_needed(spec: InstanceType) -> list[tuple[PartKey, float]] | None:
    """What `spec` is billed as: (part, quantity) pairs."""
    gpu = _SKU_GPU_NAMES.get(spec.gpu_model)
    if gpu is None:
        return None
    if gpu == "nvidia h100 80gb" and "mega" in spec.name:
        gpu = _MEGA_H100
    if not spec.vcpus or not spec.memory_gib:
        return None
    family = spec.name.split("-", 1)[0]
    return [(("core", family), float(spec.vcpus)), (("ram", family), float(spec.memory_gib)),
            (("gpu", gpu), float(spec.gpu_count))]


def _sum(needed: list[tuple[PartKey, float]], prices: dict[PartKey, PartPrice]) -> float | None:
    if any(key not in prices for key, _ in needed):
        return None
    return round(sum(prices[key].usd_per_unit * quantity for key, quantity in needed), 6)


def _skus(base_url: str, api_key: str, get: Fetch) -> Iterator[dict[str, Any]]:
    token = ""
    for _ in range(MAX_PAGES):
        page = json_page(get(_page_url(base_url, api_key, token)), SOURCE, "a JSON page of SKUs")
        yield from (sku for sku in page.get("skus") or [] if isinstance(sku, dict))
        token = page.get("nextPageToken") or ""
        if not isinstance(token, str) or not token:
            return
    raise InputError(f"Cloud Billing Catalog API: more than {MAX_PAGES} pages of SKUs")


def _page_url(base_url: str, api_key: str, token: str) -> str:
    query = {"key": api_key, "currencyCode": "USD", "pageSize": "5000"}
    if token:
        query["pageToken"] = token[:1024]
    service = f"/v1/services/{COMPUTE_ENGINE_SERVICE}/skus"
    return f"{base_url.rstrip('/')}{service}?{urllib.parse.urlencode(query)}"


def _http_get(url: str) -> bytes:
    return get_page(url, SOURCE, max_bytes=MAX_PAGE_BYTES, timeout_s=TIMEOUT_S,
                    scrub=_without_key)


def _without_key(text: str) -> str:
    return re.sub(r"key=[^&\s]+", "key=…", text)
