"""GPU catalog: instance type → GPUs and list price, GCP accelerators, MIG profiles, spot discounts.

Plain data files under `engine/data/catalog/`, each row with its source and date. Users override
prices with a CSV of `instance_type,on_demand_usd_hr` (`--prices FILE`). Policy logic never holds
a price: it asks the catalog.
"""

from __future__ import annotations

import copy
import csv
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from engine.core.billing import BilledRates
from engine.core.catalog_prices import PriceQuote, override_quote, quote
from engine.core.catalog_tables import (
    CLOUDS,
    InstanceType,
    RegionPrices,
    TypeRow,
    TypeTable,
    count,
    number,
    sorted_price_rows,
    type_key,
)
from engine.core.discounts import (
    MAX_DISCOUNTS,
    Discount,
    discount_for,
    discounted,
    is_discount_row,
    parse_discount,
)
from engine.core.errors import InputError

__all__ = [
    "CLOUDS",
    "Accelerator",
    "Catalog",
    "InstanceType",
    "MigProfile",
    "PriceQuote",
    "Successor",
    "builtin_catalog",
    "derived",
    "with_price_overrides",
]

HOURS_PER_MONTH = 730.0
TYPE_COLUMNS = ("cloud", "type", "kind", "gpu_model", "gpu_count", "gpu_memory_gib_each", "vcpus",
                "memory_gib", "mig_capable", "source", "as_of")
MAX_REMEMBERED = 4096  # name lookups a catalog keeps (see Catalog.remembered)
_NOT_REMEMBERED = object()
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Accelerator:
    cloud: str
    name: str
    gpu_model: str
    gpu_memory_gib: float
    usd_hr_per_gpu: float | None
    source: str


@dataclass(frozen=True, slots=True)
class MigProfile:
    family: str  # "A100 80GB"
    name: str  # "1g.10gb"
    compute_slices: int
    memory_gib: float
    memory_fraction: float
    max_instances: int
    resource_name: str  # "nvidia.com/mig-1g.10gb"


@dataclass(frozen=True, slots=True)
class Successor:
    """The newer instance type gpuwarden suggests for a legacy GPU generation, and why."""

    legacy_type: str
    newer_type: str
    reason: str
    source: str


class Catalog:
    """What gpuwarden knows about instance types, GPUs and their prices.

    `instance(name)` answers for GPU types only (the callers' "does this type hold GPUs");
    `instance_type(name)` for every type the catalog lists, CPU-only ones with 0 GPUs, so that
    `knows(name)` False means new or misspelt, never "no GPU". `hourly_price` prices a type per
    region and capacity.
    """

    def __init__(
        self,
        instances: Mapping[str, InstanceType] | None = None,
        accelerators: Mapping[str, Accelerator] | Callable[[], Mapping[str, Accelerator]]
        | None = None,
        mig_profiles: dict[str, list[MigProfile]] | None = None,
        spot_discounts: dict[str, float] | None = None,
        source_note: str = "gpuwarden built-in catalog (engine/data/catalog, prices dated 2026)",
        overridden: set[str] | None = None,
        *,
        table: TypeTable | None = None,
    ) -> None:
        given = dict(instances or {})
        self.table = table or TypeTable(
            lambda: {type_key(s.cloud, s.name): s for s in given.values()}, lambda c, n: {})
        self._accelerators = accelerators if accelerators is not None else {}
        self._accelerators_loaded: dict[str, Accelerator] | None = None
        self.mig_profiles = mig_profiles or {}
        self.spot_discounts = spot_discounts or {}
        self.source_note = source_note
        self.overridden = overridden or set()
        self.billed: BilledRates = {}  # resources priced at their billed rate (--billing)
        self.discounts: tuple[Discount, ...] = ()  # negotiated, off on-demand (--prices)
        self._gpu_types: dict[str, InstanceType] | None = None
        self._quotes: dict[tuple[str, str, str], PriceQuote | None] = {}
        # Lookups by GPU model name scan the tables; estates repeat a few names, so remember
        # them. Names come from input (admission requests among them): the oldest go first.
        self._by_model: OrderedDict[tuple[Hashable, ...], Any] = OrderedDict()
        self._by_model_lock = threading.Lock()

    @property
    def accelerators(self) -> dict[str, Accelerator]:
        if self._accelerators_loaded is None:
            found = self._accelerators
            self._accelerators_loaded = dict(found() if callable(found) else found)
        return self._accelerators_loaded

    @property
    def instances(self) -> dict[str, InstanceType]:
        """Every GPU instance type by name, priced in its default region (parses every cloud's
        prices on first use: for whole-catalog questions, not per-resource lookups)."""
        if self._gpu_types is None:
            self._gpu_types = {
                spec.name: self.table.priced(spec)
                for spec in self.table.gpu_types()
            }
        return self._gpu_types

    def remembered(self, key: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
        """`compute()` once per key for this catalog, for the last MAX_REMEMBERED keys
        remembered: lookups that scan its tables by name, asked per resource by the checks.
        Safe from several threads (the webhook's): a hit is one dict read, which needs no lock;
        only remembering takes it."""
        found: T | object = self._by_model.get(key, _NOT_REMEMBERED)
        if found is not _NOT_REMEMBERED:
            return found  # type: ignore[return-value]
        result = compute()
        with self._by_model_lock:
            self._by_model[key] = result
            while len(self._by_model) > MAX_REMEMBERED:
                self._by_model.popitem(last=False)
        return result

    def instance_type(self, name: str | None) -> InstanceType | None:
        """Any type the catalog lists (GPU or not), Azure sizes case-insensitively."""
        return self.table.find(name)

    def knows(self, name: str | None) -> bool:
        return self.instance_type(name) is not None

    def instance(self, name: str | None) -> InstanceType | None:
        """The GPU instance type called `name`; None for a CPU-only or unknown type."""
        spec = self.instance_type(name)
        return spec if spec is not None and spec.gpu_count > 0 else None

    def hourly_price(
        self, instance_type: str | None, region: str | None = None,
        capacity: str = "on_demand",
    ) -> PriceQuote | None:
        """The list price of one `instance_type` in `region` for `capacity` (`on_demand` or
        `spot`); None when the type is unknown or has no price anywhere. See `PriceQuote`."""
        key = (instance_type or "", region or "", capacity)
        if key in self._quotes:
            return self._quotes[key]
        found = self._hourly_price(instance_type, region, capacity)
        if len(self._quotes) < MAX_REMEMBERED:  # names and regions come from input
            self._quotes[key] = found
        return found

    def _hourly_price(self, instance_type: str | None, region: str | None,
                      capacity: str) -> PriceQuote | None:
        spec = self.instance_type(instance_type)
        if spec is None:
            return None
        if spec.name in self.overridden:
            found = override_quote(spec, region, capacity, self.spot_discount(spec.cloud))
        else:
            found = quote(spec, self.table.region_prices(spec.cloud, spec.name), region,
                          capacity, self.spot_discount(spec.cloud))
        if found is None or not self.discounts:
            return found
        return discounted(found, discount_for(self.discounts, spec.cloud, spec.name))

    def accelerator(self, name: str | None) -> Accelerator | None:
        if not name:
            return None
        # Terraform may hold a full URL: .../acceleratorTypes/nvidia-tesla-t4
        return self.accelerators.get(name.rsplit("/", 1)[-1])

    def gpu_hourly(self, gpu_model: str | None) -> float | None:
        return self.remembered(("hourly", gpu_model, None), lambda: self._gpu_hourly(gpu_model))

    def _gpu_hourly(self, gpu_model: str | None) -> float | None:
        """Cheapest on-demand $/GPU-hour for a GPU model across the catalog's instance types.

        Used to price Kubernetes workloads, which hold GPUs but no instance type. Matches catalog
        names and node labels alike ("NVIDIA-A100-SXM4-80GB" → A100 80GB rows).
        """
        if not gpu_model:
            return None
        wanted = _model_key(gpu_model)
        prices = [
            spec.on_demand_usd_hr * self._kept_share(spec) / spec.gpu_count
            for spec in self.instances.values()
            if spec.on_demand_usd_hr is not None and _model_key(spec.gpu_model) == wanted
        ]
        prices += [
            acc.usd_hr_per_gpu
            for acc in self.accelerators.values()
            if acc.usd_hr_per_gpu is not None and _model_key(acc.gpu_model) == wanted
        ]
        return min(prices, default=None)

    def discount_note(self, instance_type: str | None, region: str | None,
                      usd_per_h: float) -> str:
        """" less a negotiated N% (FILE)" when `usd_per_h` is this type's discounted catalog
        price (not a price the input gave), else ""."""
        if not self.discounts or not instance_type:
            return ""
        found = self.hourly_price(instance_type, region, "on_demand")
        if found is None or not found.discount_pct or abs(found.usd_per_h - usd_per_h) > 1e-9:
            return ""
        return f" less a negotiated {found.discount_pct:g}% ({found.discount_source})"

    def _kept_share(self, spec: InstanceType) -> float:
        """The share of its list price a type costs after a negotiated discount."""
        found = discount_for(self.discounts, spec.cloud, spec.name) if self.discounts else None
        return 1 - found.percent / 100 if found else 1.0

    def spot_discount(self, cloud: str) -> float:
        return self.spot_discounts.get(cloud, 0.6)

    def mig_family(self, gpu_model: str | None, memory_gib: float | None = None) -> str | None:
        return self.remembered(("mig", gpu_model, memory_gib),
                               lambda: self._mig_family(gpu_model, memory_gib))

    def _mig_family(self, gpu_model: str | None, memory_gib: float | None) -> str | None:
        """The MIG profile table that applies to a GPU model name, or None if not MIG-capable.

        Accepts catalog names ("NVIDIA A100 80GB SXM") and node labels
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H200").
        """
        if not gpu_model:
            return None
        text = gpu_model.upper()
        for chip in ("H200", "H100", "A100", "A30", "B200"):
            if chip not in text:
                continue
            found = re.search(r"(\d+)\s*GB", text)
            memory = float(found.group(1)) if found else memory_gib
            candidates = [f for f in self.mig_profiles if f.startswith(chip + " ")]
            if not candidates:
                return None
            if memory is None:
                return min(candidates, key=_family_memory)
            return min(candidates, key=lambda f: abs(_family_memory(f) - memory))
        return None

    def smaller_sibling(self, instance_type: str | None) -> InstanceType | None:
        """The same cloud's type with the same GPU chip and count but less memory per GPU
        (p4de.24xlarge → p4d.24xlarge); the largest such memory, then the cheapest. None when the
        type is unknown or has no sibling."""
        return self.remembered(("sibling", instance_type, None),
                               lambda: self._smaller_sibling(instance_type))

    def _smaller_sibling(self, instance_type: str | None) -> InstanceType | None:
        current = self.instance(instance_type)
        if current is None:
            return None
        chip = _model_key(current.gpu_model)[0]
        siblings = [
            spec for spec in self.instances.values()
            if spec.cloud == current.cloud
            and spec.gpu_count == current.gpu_count
            and spec.gpu_memory_gib < current.gpu_memory_gib
            and _model_key(spec.gpu_model)[0] == chip
        ]
        return min(siblings, default=None, key=lambda s: (
            -s.gpu_memory_gib, s.on_demand_usd_hr is None, s.on_demand_usd_hr or 0.0))

    def newer_equivalent(self, instance_type: str | None) -> Successor | None:
        """The suggested successor of a legacy (V100-generation) type, from gpu_successors.csv."""
        return _successors().get(instance_type) if instance_type else None

    def smallest_mig_fit(
        self, family: str, need_gib: float, headroom: float = 0.2, max_fraction: float = 0.5
    ) -> MigProfile | None:
        """Smallest profile holding need × (1 + headroom), at most `max_fraction` of the GPU."""
        return self.remembered(("mig-fit", family, need_gib, headroom, max_fraction),
                               lambda: self._smallest_mig_fit(family, need_gib, headroom,
                                                              max_fraction))

    def _smallest_mig_fit(self, family: str, need_gib: float, headroom: float,
                          max_fraction: float) -> MigProfile | None:
        want = need_gib * (1.0 + headroom)
        fitting = [
            p
            for p in self.mig_profiles.get(family, [])
            if p.memory_gib >= want and p.memory_fraction <= max_fraction
        ]
        return min(fitting, key=lambda p: (p.memory_gib, p.compute_slices), default=None)


_CHIPS = ("H200", "H100", "A100", "A10G", "A10", "L40S", "L4", "T4", "V100", "P100", "P4", "A30")


def _model_key(name: str) -> tuple[str, str]:
    """(chip, memory) identity of a GPU model name, ignoring vendor and form factor."""
    text = name.upper().replace("-", " ")
    chip = next((c for c in _CHIPS if re.search(rf"\b{c}\b", text)), text)
    memory = re.search(r"(\d+)\s*GB", text)
    return chip, memory.group(1) if memory else ""


def _family_memory(family: str) -> float:
    found = re.search(r"(\d+)GB", family)
    return float(found.group(1)) if found else 0.0


def _rows(name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(_text(name).splitlines()))


def _float(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


@cache
def _successors() -> dict[str, Successor]:
    return {
        row["legacy_type"]: Successor(
            legacy_type=row["legacy_type"],
            newer_type=row["newer_type"],
            reason=row["reason"],
            source=row["source"],
        )
        for row in _rows("gpu_successors.csv")
    }


def _text(name: str) -> str:
    return resources.files("engine").joinpath(f"data/catalog/{name}").read_text("utf-8")


def generated_type(row: Mapping[str, str]) -> InstanceType:
    """A row of instance_types.csv (or of a `--catalog` file: same columns)."""
    return InstanceType(
        cloud=row["cloud"].strip(),
        name=row["type"].strip(),
        gpu_model=(row.get("gpu_model") or "").strip(),
        gpu_count=count(row.get("gpu_count") or "0"),
        gpu_memory_gib=number(row.get("gpu_memory_gib_each")) or 0.0,
        on_demand_usd_hr=None,
        region="",
        source=row.get("source") or "",
        vcpus=number(row.get("vcpus")),
        memory_gib=number(row.get("memory_gib")),
        mig_capable=(row.get("mig_capable") or "").strip().lower() == "true",
        as_of=row.get("as_of") or "",
    )


def _type_line(line: str) -> InstanceType:
    return generated_type(dict(zip(TYPE_COLUMNS, next(csv.reader([line])), strict=False)))


def _curated_type(row: dict[str, str]) -> InstanceType:
    return InstanceType(
        cloud=row["cloud"],
        name=row["instance_type"],
        gpu_model=row["gpu_model"],
        gpu_count=count(row["gpu_count"]),
        gpu_memory_gib=float(row["gpu_mem_gib_each"]),
        on_demand_usd_hr=_float(row["on_demand_usd_hr"]),
        region=row["region"],
        source=row["source"],
        vcpus=_float(row["vcpu"]),
        memory_gib=_float(row["mem_gib"]),
    )


@cache
def _builtin_types() -> dict[str, TypeRow]:
    """instance_types.csv by lookup key (lines parsed on first lookup), with gpu_instances.csv
    (the curated rows) where it adds something: a type the generated file lacks, or a price
    (region and source) to fall back on."""
    found: dict[str, TypeRow] = {}
    for line in _text("instance_types.csv").splitlines()[1:]:
        cloud, name, kind, _ = line.split(",", 3)
        if kind == "machine":
            found[type_key(cloud, name)] = line
    for row in _rows("gpu_instances.csv"):
        curated = _curated_type(row)
        key = type_key(curated.cloud, curated.name)
        generated = found.get(key)
        found[key] = curated if generated is None else replace(
            _type_line(generated) if isinstance(generated, str) else generated,
            on_demand_usd_hr=curated.on_demand_usd_hr, region=curated.region)
    return found


@cache
def _prices_text() -> str:
    return _text("prices.csv")


def _builtin_prices(cloud: str, name: str) -> RegionPrices:
    return sorted_price_rows(_prices_text(), cloud, name)


def _builtin_accelerators() -> dict[str, Accelerator]:
    """accelerators.csv, then the GCP accelerator types of instance_types.csv it lacks
    (priced per GPU from prices.csv where it has them)."""
    found = {
        row["accelerator"]: Accelerator(
            cloud=row["cloud"],
            name=row["accelerator"],
            gpu_model=row["gpu_model"],
            gpu_memory_gib=float(row["gpu_mem_gib_each"]),
            usd_hr_per_gpu=_float(row["on_demand_usd_hr_per_gpu"]),
            source=row["source"],
        )
        for row in _rows("accelerators.csv")
    }
    for row in csv.DictReader(_text("instance_types.csv").splitlines()):
        if row["kind"] != "accelerator" or row["type"] in found:
            continue
        price = _builtin_prices(row["cloud"], row["type"]).get("us-central1")
        found[row["type"]] = Accelerator(
            cloud=row["cloud"], name=row["type"], gpu_model=row["gpu_model"],
            gpu_memory_gib=number(row["gpu_memory_gib_each"]) or 0.0,
            usd_hr_per_gpu=price.on_demand if price else None,
            source=f"{row['source']} ({row['as_of']})"
            + (f"; price: {price.source} ({price.as_of})" if price else ""),
        )
    return found


@cache
def builtin_catalog() -> Catalog:
    """The built-in catalog. Cheap to call: the type and price files are parsed on the first
    lookup that needs them (prices one cloud at a time), once per process."""
    profiles: dict[str, list[MigProfile]] = {}
    for row in _rows("mig_profiles.csv"):
        profiles.setdefault(row["gpu_model"], []).append(
            MigProfile(
                family=row["gpu_model"],
                name=row["profile"],
                compute_slices=int(row["compute_slices"]),
                memory_gib=float(row["memory_gib"]),
                memory_fraction=float(row["memory_fraction"]),
                max_instances=int(row["max_instances"]),
                resource_name=row["k8s_resource_mixed"],
            )
        )
    discounts = {row["cloud"]: float(row["spot_discount"]) for row in _rows("spot_discounts.csv")}
    table = TypeTable(_builtin_types, _builtin_prices, parse=_type_line)
    return Catalog(None, _builtin_accelerators, profiles, discounts, table=table)


def derived(base: Catalog, table: TypeTable, note: str, overridden: set[str]) -> Catalog:
    """A catalog like `base` with another type table (the same GPUs, MIG tables, discounts)."""
    made = Catalog(None, lambda: base.accelerators, base.mig_profiles, base.spot_discounts,
                   f"{base.source_note}; {note}", base.overridden | overridden, table=table)
    made.billed = base.billed  # a type learned after --billing keeps the billed rates
    made.discounts = base.discounts
    return made


def with_billed_rates(base: Catalog, rates: BilledRates, note: str) -> Catalog:
    """`base` pricing the resources in `rates` at their billed rates (a cost export)."""
    billed = copy.copy(base)  # the same tables and caches: billed rates change no list price
    billed.billed = rates
    billed.source_note = f"{base.source_note}; {note}"
    return billed


def with_price_overrides(base: Catalog, text: str, path: str) -> Catalog:
    """A copy of `base` whose on-demand prices come from the CSV `text`
    (`instance_type,on_demand_usd_hr`) of the price file `path` (read by `engine.loading`):
    one price per type, for every region. Rows `CLOUD:PATTERN` with a `discount_pct` are
    negotiated discounts (`engine.core.discounts`)."""
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as exc:  # a field over the csv module's limit, a stray quote...
        raise InputError(f"price file is not valid CSV: {exc}", file=str(path)) from None
    changed: dict[str, InstanceType] = {}
    discounts: list[Discount] = []
    for line, row in enumerate(rows, start=2):
        name = (row.get("instance_type") or "").strip()
        if is_discount_row(name):
            discounts.append(parse_discount(name, row.get("discount_pct"), path, line))
            if len(discounts) > MAX_DISCOUNTS:
                raise InputError(f"more than {MAX_DISCOUNTS} discount rows", file=path)
            continue
        spec = _overridden_type(base, name, row.get("on_demand_usd_hr"), path, line)
        if spec is not None:
            changed[type_key(spec.cloud, spec.name)] = spec
    return _with_discounts(_with_overrides(base, changed, path), tuple(discounts), path)


def _overridden_type(base: Catalog, name: str, price: str | None, path: str,
                     line: int) -> InstanceType | None:
    try:
        usd = float(price or "")
    except ValueError:
        raise InputError(
            "expected columns instance_type,on_demand_usd_hr with a number",
            file=str(path),
            line=line,
        ) from None
    old = base.instance_type(name)
    if old is None and name:
        raise InputError(f"unknown instance type {name!r}", file=str(path), line=line)
    return replace(old, on_demand_usd_hr=usd, source=f"override: {path}") if old else None


def _with_overrides(base: Catalog, changed: dict[str, InstanceType], path: str) -> Catalog:
    if not changed:
        return base
    # The override is the type's one price, for every region: no regional rows under it.
    no_regions: dict[str, dict[str, RegionPrices]] = {}
    for key, spec in changed.items():
        no_regions.setdefault(spec.cloud, {})[key] = {}
    table = base.table.layered(changed, no_regions)
    return derived(base, table, f"prices overridden from {path}",
                   {spec.name for spec in changed.values()})


def _with_discounts(base: Catalog, discounts: tuple[Discount, ...], path: str) -> Catalog:
    if not discounts:
        return base
    made = derived(base, base.table, f"negotiated discounts from {path}", set())
    made.discounts = base.discounts + discounts
    return made
