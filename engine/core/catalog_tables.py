"""The instance-type table behind the catalog: every type of each cloud (CPU-only ones with 0
GPUs) and its list prices per region, parsed from CSV text on first use and layered with
overrides (`--catalog FILE`, `--prices FILE`).

Names: AWS and GCP types match exactly after trimming; Azure sizes case-insensitively
(`standard_nc6s_v3` is `Standard_NC6s_v3`), as real configurations write them both ways.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

# The region whose price stands for a type when the caller names none (or one without a price).
DEFAULT_REGIONS = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}
CLOUDS = tuple(DEFAULT_REGIONS)
MAX_TYPE_NAME = 256  # longer names come from hostile input, not a cloud
MAX_FOUND = 4096  # names a table remembers the answer for


@dataclass(frozen=True, slots=True)
class InstanceType:
    cloud: str
    name: str
    gpu_model: str
    gpu_count: float  # fractional for GPU partitions (AWS g6f, Azure NVads A10 v5)
    gpu_memory_gib: float
    on_demand_usd_hr: float | None  # in `region`, the type's default priced region
    region: str
    source: str
    vcpus: float | None = None
    memory_gib: float | None = None
    mig_capable: bool = False
    as_of: str = ""


@dataclass(frozen=True, slots=True)
class RegionPrice:
    on_demand: float | None
    spot: float | None
    source: str
    as_of: str


RegionPrices = dict[str, RegionPrice]  # region → price


def type_key(cloud: str, name: str) -> str:
    """The lookup key of a type name: Azure sizes compare lower-cased."""
    name = name.strip()
    return name.lower() if cloud == "azure" else name


def number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def count(text: str) -> float:
    """A GPU count as written: whole counts stay ints (JSON and messages print 8, not 8.0)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def parse_price_line(line: str) -> tuple[str, str, str, RegionPrice] | None:
    """(cloud, type, region, price) of a `cloud,type,region,on_demand,spot,source,as_of` line."""
    row = next(csv.reader([line])) if '"' in line else line.split(",")
    if len(row) < 7:
        return None
    cloud, name, region, on_demand, spot, source, as_of = row[:7]
    return cloud, name, region, RegionPrice(number(on_demand), number(spot), source, as_of)


def _line_key(text: str, start: int) -> tuple[tuple[str, str], int]:
    """(cloud, lower-cased type) of the line starting at `start`, and where the line ends."""
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    cloud, _, rest = text[start:end].partition(",")
    return (cloud, rest.partition(",")[0].lower()), end


def sorted_price_rows(text: str, cloud: str, name: str) -> RegionPrices:
    """The rows of one type in a prices.csv sorted by cloud and lower-cased type (the generator
    writes it so; tests/test_catalog.py checks it): a binary search over the text, so a lookup
    costs microseconds and no row of another type is parsed."""
    target = (cloud, name.lower())
    lo, hi = text.find("\n") + 1, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        newline = text.rfind("\n", lo, mid)
        start = newline + 1 if newline >= 0 else lo
        key, end = _line_key(text, start)
        if key < target:
            lo = end + 1
        else:
            hi = start
    found: RegionPrices = {}
    while lo < len(text):
        key, end = _line_key(text, lo)
        if key != target:
            break
        parsed = parse_price_line(text[lo:end])
        if parsed is not None and (cloud == "azure" or parsed[1] == name):
            found[parsed[2]] = parsed[3]
        lo = end + 1
    return found


TypeRow = InstanceType | str  # a parsed type, or its CSV line not parsed yet


class TypeTable:
    """Types by cloud and name, and their prices per region.

    `load_types()` gives every built-in type by lookup key (as a parsed type, or a CSV line that
    `parse` turns into one on first lookup); `load_prices(cloud, name)` one type's prices. Each
    runs once, for what a lookup needs: a PR check on an AWS plan parses no Azure row.
    `types`/`prices` layered on top win (whole rows).
    """

    def __init__(
        self,
        load_types: Callable[[], Mapping[str, TypeRow]],
        load_prices: Callable[[str, str], RegionPrices],
        types: Mapping[str, InstanceType] | None = None,
        prices: Mapping[str, Mapping[str, RegionPrices]] | None = None,
        parse: Callable[[str], InstanceType] | None = None,
    ) -> None:
        self._load_types = load_types
        self._load_prices = load_prices
        self._parse = parse
        self._own_types = dict(types or {})  # lookup key → type
        self._own_prices = {cloud: dict(rows) for cloud, rows in (prices or {}).items()}
        self._types: dict[str, TypeRow] | None = None
        self._prices: dict[tuple[str, str], RegionPrices] = {}
        self._priced: dict[str, InstanceType] = {}
        self._found: dict[str, InstanceType | None] = {}
        self._lock = threading.Lock()

    def layered(
        self, types: Mapping[str, InstanceType], prices: Mapping[str, Mapping[str, RegionPrices]]
    ) -> TypeTable:
        """A table with `types` (by lookup key) and `prices` (cloud → key → region) over this
        one's: a row of the new layer replaces the type (and a type's own prices) whole."""
        merged_prices = {c: dict(rows) for c, rows in self._own_prices.items()}
        for cloud, rows in prices.items():
            merged_prices.setdefault(cloud, {}).update(rows)
        return TypeTable(self._load_types, self._load_prices, {**self._own_types, **types},
                         merged_prices, self._parse)

    def _rows(self) -> dict[str, TypeRow]:
        with self._lock:
            if self._types is None:
                self._types = {**self._load_types(), **self._own_types}
            return self._types

    def _spec(self, key: str) -> InstanceType | None:
        rows = self._rows()
        row = rows.get(key)
        if isinstance(row, str):
            assert self._parse is not None
            row = rows[key] = self._parse(row)
        return row

    def gpu_types(self) -> list[InstanceType]:
        """Every type with GPUs, parsed (for whole-catalog questions, not per-resource lookups;
        CPU-only lines are skipped unparsed)."""
        rows = self._rows()
        keys = [k for k, row in list(rows.items()) if not isinstance(row, str) or _has_gpus(row)]
        return [spec for key in keys if (spec := self._spec(key)) is not None and spec.gpu_count]

    def find(self, name: str | None) -> InstanceType | None:
        """The type called `name` (Azure case-insensitively), its default price filled in."""
        if not name or len(name) > MAX_TYPE_NAME:
            return None
        if name in self._found:
            return self._found[name]
        found = self._find(name.strip())
        if len(self._found) < MAX_FOUND:  # names come from input: remember a bounded few
            self._found[name] = found
        return found

    def _find(self, name: str) -> InstanceType | None:
        spec = self._spec(name) or self._spec(type_key("azure", name))
        if spec is None or (spec.cloud != "azure" and spec.name != name):
            return None
        return self.priced(spec)

    def priced(self, spec: InstanceType) -> InstanceType:
        """`spec` with the on-demand price of its default region (else its first priced one)."""
        key = f"{spec.cloud}/{spec.name}"
        found = self._priced.get(key)
        if found is not None:
            return found
        rows = self.region_prices(spec.cloud, spec.name)
        region = _default_priced_region(spec, rows)
        if region is not None:
            price = rows[region]
            spec = replace(spec, on_demand_usd_hr=price.on_demand, region=region,
                           source=f"{spec.source}; price: {price.source} ({price.as_of})")
        self._priced[key] = spec
        return spec

    def region_prices(self, cloud: str, name: str) -> RegionPrices:
        key = type_key(cloud, name)
        own = self._own_prices.get(cloud, {}).get(key)
        if own is not None:
            return own
        found = self._prices.get((cloud, key))
        if found is None:
            found = self._prices[(cloud, key)] = self._load_prices(cloud, name)
        return found


def _has_gpus(line: str) -> bool:
    """Whether an instance_types.csv line (not parsed yet) has a GPU count above 0."""
    fields = line.split(",", 5)
    return len(fields) > 4 and fields[4] not in ("", "0")


def _default_priced_region(spec: InstanceType, rows: RegionPrices) -> str | None:
    """The region whose on-demand price stands for the type: the cloud's default region, else the
    first priced region by name; None leaves the type's own (curated) price."""
    default = DEFAULT_REGIONS.get(spec.cloud, "")
    if default in rows and rows[default].on_demand is not None:
        return default
    if spec.on_demand_usd_hr is not None:
        return None
    priced = sorted(r for r, p in rows.items() if p.on_demand is not None)
    return priced[0] if priced else None
