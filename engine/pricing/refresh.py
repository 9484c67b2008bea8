"""`gpuwarden catalog refresh`: ask a cloud's price API, write a `--catalog FILE`."""

from __future__ import annotations

import os

from engine.core.catalog import Catalog
from engine.core.catalog_tables import DEFAULT_REGIONS
from engine.core.errors import InputError
from engine.pricing.rows import PriceRow, rows_file

REFRESHABLE = ("aws", "azure", "gcp")
MAX_REGIONS = 64


def refreshed_file(cloud: str, regions: list[str], catalog: Catalog,
                   endpoint_url: str | None = None) -> tuple[str, list[str]]:
    """The catalog CSV of `cloud`'s current prices in `regions` (its default region if none),
    and the types the API priced that the catalog does not list (left out)."""
    if cloud not in REFRESHABLE:
        raise InputError(f"--cloud must be one of {', '.join(REFRESHABLE)}")
    chosen = sorted({r.strip() for r in regions if r.strip()}) or [DEFAULT_REGIONS[cloud]]
    if len(chosen) > MAX_REGIONS or any(not r.isprintable() or len(r) > 64 for r in chosen):
        raise InputError(f"--region: at most {MAX_REGIONS} printable region names")
    rows = _rows(cloud, chosen, catalog, endpoint_url)
    text, skipped = rows_file(rows, catalog)
    return text, sorted({*skipped, *_unpriced(cloud, rows, catalog)})


def _unpriced(cloud: str, rows: list[PriceRow], catalog: Catalog) -> list[str]:
    """GCP machine types the API did not fully price (a core, memory or GPU SKU missing)."""
    if cloud != "gcp":
        return []
    priced = {row.type for row in rows}
    return [spec.name for spec in catalog.table.gpu_types()
            if spec.cloud == "gcp" and spec.name not in priced]


def _rows(cloud: str, regions: list[str], catalog: Catalog,
          endpoint_url: str | None) -> list[PriceRow]:
    if cloud == "gcp":
        from engine.pricing.gcp import BASE_URL as GCP_URL
        from engine.pricing.gcp import gcp_prices

        specs = [spec for spec in catalog.table.gpu_types() if spec.cloud == "gcp"]
        return gcp_prices(regions, specs, os.environ.get("GPUWARDEN_GCP_API_KEY", ""),
                          endpoint_url or GCP_URL)
    if cloud == "azure":
        from engine.pricing.azure import BASE_URL, azure_prices

        return azure_prices(regions, endpoint_url or BASE_URL)
    from engine.pricing.aws import aws_prices

    types = sorted(spec.name for spec in catalog.table.gpu_types() if spec.cloud == "aws")
    return aws_prices(regions, types, endpoint_url)
