"""A refreshed price: one row per type and region, and the `--catalog FILE` CSV that holds them."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass

from engine.core.catalog import Catalog

COLUMNS = ("cloud", "type", "gpu_model", "gpu_count", "gpu_memory_gib_each", "vcpus",
           "memory_gib", "mig_capable", "region", "on_demand_usd_per_h", "spot_usd_per_h",
           "source", "as_of")


@dataclass(frozen=True, slots=True)
class PriceRow:
    cloud: str
    type: str
    region: str
    on_demand_usd_hr: float | None
    spot_usd_hr: float | None
    source: str
    as_of: str  # ISO date the provider gives for the price (effective or publication date)


def rows_file(rows: Iterable[PriceRow], catalog: Catalog) -> tuple[str, list[str]]:
    """The `--catalog` CSV of `rows` (each type's GPU facts from `catalog`, since a catalog row
    replaces its type whole), and the types skipped because the catalog does not list them."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    skipped: set[str] = set()
    for row in sorted(rows, key=lambda r: (r.cloud, r.type, r.region)):
        spec = catalog.instance_type(row.type)
        if spec is None or spec.cloud != row.cloud:
            skipped.add(row.type)
            continue
        if not spec.gpu_count:
            continue
        writer.writerow([
            row.cloud, spec.name, spec.gpu_model,
            f"{spec.gpu_count:g}", f"{spec.gpu_memory_gib:g}" if spec.gpu_count else "",
            _optional(spec.vcpus), _optional(spec.memory_gib), str(spec.mig_capable).lower(),
            row.region, _optional(row.on_demand_usd_hr), _optional(row.spot_usd_hr),
            row.source, row.as_of,
        ])
    return out.getvalue(), sorted(skipped)


def _optional(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}".rstrip("0").rstrip(".")
