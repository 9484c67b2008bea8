"""Rows a user adds to the catalog (`--catalog FILE`): the columns of instance_types.csv
(`cloud,type,gpu_count` required; `kind,gpu_model,gpu_memory_gib_each,vcpus,memory_gib,
mig_capable,source,as_of` optional), and optionally `region,on_demand_usd_per_h,spot_usd_per_h`.
A row replaces the built-in type of that name whole; its price, if any, is its only price."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping

from engine.core.catalog import Catalog, derived, generated_type
from engine.core.catalog_tables import (
    CLOUDS,
    DEFAULT_REGIONS,
    MAX_TYPE_NAME,
    InstanceType,
    RegionPrice,
    RegionPrices,
    type_key,
)
from engine.core.errors import InputError

MAX_ROWS = 200_000
MAX_GPUS = 4096.0
MAX_NUMBER = 1e9
REQUIRED = ("cloud", "type", "gpu_count")
NUMBERS = ("gpu_count", "gpu_memory_gib_each", "vcpus", "memory_gib", "on_demand_usd_per_h",
           "spot_usd_per_h")


def with_catalog_rows(base: Catalog, text: str, path: str) -> Catalog:
    """`base` with the types of the catalog file `path` (its CSV `text`)."""
    try:
        return _with_rows(base, text, path)
    except csv.Error as exc:  # a field over the csv module's limit, a stray quote...
        raise InputError(f"catalog file is not valid CSV: {exc}", file=path) from None


def _with_rows(base: Catalog, text: str, path: str) -> Catalog:
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"catalog file needs the columns {', '.join(REQUIRED)} (missing "
                         f"{', '.join(missing)})", file=path, line=1)
    types: dict[str, InstanceType] = {}
    prices: dict[str, dict[str, RegionPrices]] = {}
    for line, row in enumerate(reader, start=2):
        if line > MAX_ROWS:
            raise InputError(f"catalog file has more than {MAX_ROWS} rows", file=path, line=line)
        spec = _checked_type(row, path, line)
        key = type_key(spec.cloud, spec.name)
        types[key] = spec
        price = _row_price(row, spec, path, line)
        if price is not None:
            prices.setdefault(spec.cloud, {}).setdefault(key, {})[price[0]] = price[1]
        else:
            prices.setdefault(spec.cloud, {}).setdefault(key, {})
    if not types:
        raise InputError("catalog file has no rows", file=path)
    table = base.table.layered(types, prices)
    return derived(base, table, f"types from {path}", set())


def with_instance_types(base: Catalog, specs: list[InstanceType], note: str) -> Catalog:
    """`base` with `specs` added (unpriced unless they carry a price), e.g. live cloud facts."""
    types = {type_key(spec.cloud, spec.name): spec for spec in specs}
    return derived(base, base.table.layered(types, {}), f"types from {note}", set())


def _checked_type(row: Mapping[str, str | None], path: str, line: int) -> InstanceType:
    cloud = (row.get("cloud") or "").strip().lower()
    name = (row.get("type") or "").strip()
    if cloud not in CLOUDS:
        raise InputError(f"cloud must be one of {', '.join(CLOUDS)}", file=path, line=line)
    if not name or len(name) > MAX_TYPE_NAME or not name.isprintable() or "," in name:
        raise InputError("type must be a printable name of at most "
                         f"{MAX_TYPE_NAME} characters", file=path, line=line)
    for column in NUMBERS:
        _checked_number(row.get(column), column, path, line)
    gpus = float(row.get("gpu_count") or "nan")
    if math.isnan(gpus) or gpus > MAX_GPUS:
        raise InputError(f"gpu_count must be a number from 0 to {MAX_GPUS:g}", file=path,
                         line=line)
    if gpus > 0 and not (row.get("gpu_model") or "").strip():
        raise InputError("a type with GPUs needs its gpu_model", file=path, line=line)
    clean = {k: (v or "") for k, v in row.items() if isinstance(k, str)}
    spec = generated_type({**clean, "cloud": cloud, "type": name,
                           "source": clean.get("source") or f"catalog file {path}"})
    return spec


def _checked_number(value: str | None, column: str, path: str, line: int) -> None:
    if value is None or not value.strip():
        return
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (0 <= number <= MAX_NUMBER):
        raise InputError(f"{column} must be a number from 0 to {MAX_NUMBER:g}", file=path,
                         line=line)


def _row_price(row: Mapping[str, str | None], spec: InstanceType, path: str,
               line: int) -> tuple[str, RegionPrice] | None:
    on_demand, spot = row.get("on_demand_usd_per_h"), row.get("spot_usd_per_h")
    if not (on_demand or "").strip() and not (spot or "").strip():
        return None
    region = (row.get("region") or "").strip() or DEFAULT_REGIONS[spec.cloud]
    if len(region) > MAX_TYPE_NAME or not region.isprintable():
        raise InputError("region must be a printable name", file=path, line=line)
    return region, RegionPrice(_optional(on_demand), _optional(spot), spec.source, spec.as_of)


def _optional(value: str | None) -> float | None:
    return float(value) if value and value.strip() else None
