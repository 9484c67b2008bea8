"""GPU catalog: instance type → GPUs and list price, GCP accelerators, MIG profiles, spot discounts.

Plain data files under `engine/data/catalog/`, each row with its source and date. Users override
prices with a CSV of `instance_type,on_demand_usd_hr` (`--prices FILE`). Policy logic never holds
a price: it asks the catalog.
"""

from __future__ import annotations

import csv
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from engine.core.errors import InputError

HOURS_PER_MONTH = 730.0
MAX_REMEMBERED = 4096  # name lookups a catalog keeps (see Catalog.remembered)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class InstanceType:
    cloud: str
    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: float
    on_demand_usd_hr: float | None
    region: str
    source: str


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


@dataclass
class Catalog:
    instances: dict[str, InstanceType]
    accelerators: dict[str, Accelerator]
    mig_profiles: dict[str, list[MigProfile]]
    spot_discounts: dict[str, float]
    source_note: str = "gpuwarden built-in catalog (engine/data/catalog, prices dated 2026)"
    overridden: set[str] = field(default_factory=set)
    # Lookups by GPU model name scan the tables; estates repeat a few names, so remember them.
    # Names come from input (admission requests among them): least recently used ones go first.
    _by_model: OrderedDict[tuple[str, str | None, float | None], Any] = field(
        default_factory=OrderedDict, repr=False, compare=False
    )
    _by_model_lock: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                           compare=False)

    def remembered(
        self, key: tuple[str, str | None, float | None], compute: Callable[[], T]
    ) -> T:
        """`compute()` once per key for this catalog, for the last MAX_REMEMBERED keys used:
        lookups that scan its tables by name. Safe from several threads (the webhook's)."""
        with self._by_model_lock:
            if key in self._by_model:
                self._by_model.move_to_end(key)
                found: T = self._by_model[key]
                return found
        result = compute()
        with self._by_model_lock:
            self._by_model[key] = result
            while len(self._by_model) > MAX_REMEMBERED:
                self._by_model.popitem(last=False)
        return result

    def instance(self, name: str | None) -> InstanceType | None:
        return self.instances.get(name) if name else None

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
            spec.on_demand_usd_hr / spec.gpu_count
            for spec in self.instances.values()
            if spec.on_demand_usd_hr is not None and _model_key(spec.gpu_model) == wanted
        ]
        prices += [
            acc.usd_hr_per_gpu
            for acc in self.accelerators.values()
            if acc.usd_hr_per_gpu is not None and _model_key(acc.gpu_model) == wanted
        ]
        return min(prices, default=None)

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
    text = resources.files("engine").joinpath(f"data/catalog/{name}").read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


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


@cache
def builtin_catalog() -> Catalog:
    instances = {
        row["instance_type"]: InstanceType(
            cloud=row["cloud"],
            name=row["instance_type"],
            gpu_model=row["gpu_model"],
            gpu_count=int(row["gpu_count"]),
            gpu_memory_gib=float(row["gpu_mem_gib_each"]),
            on_demand_usd_hr=_float(row["on_demand_usd_hr"]),
            region=row["region"],
            source=row["source"],
        )
        for row in _rows("gpu_instances.csv")
    }
    accelerators = {
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
    return Catalog(instances, accelerators, profiles, discounts)


def with_price_overrides(base: Catalog, text: str, path: str) -> Catalog:
    """A copy of `base` whose on-demand prices come from the CSV `text`
    (`instance_type,on_demand_usd_hr`) of the price file `path` (read by `engine.loading`)."""
    rows = list(csv.DictReader(text.splitlines()))
    instances = dict(base.instances)
    overridden: set[str] = set()
    for number, row in enumerate(rows, start=2):
        name, price = row.get("instance_type"), row.get("on_demand_usd_hr")
        try:
            usd = float(price or "")
        except ValueError:
            raise InputError(
                "expected columns instance_type,on_demand_usd_hr with a number",
                file=str(path),
                line=number,
            ) from None
        if name in instances:
            old = instances[name]
            instances[name] = InstanceType(
                old.cloud, old.name, old.gpu_model, old.gpu_count, old.gpu_memory_gib,
                usd, old.region, f"override: {path}",
            )
            overridden.add(name)
        elif name:
            raise InputError(f"unknown instance type {name!r}", file=str(path), line=number)
    return Catalog(
        instances, base.accelerators, base.mig_profiles, base.spot_discounts,
        f"{base.source_note}; prices overridden from {path}", overridden,
    )
