#!/usr/bin/env python3
"""Build gpuwarden's instance-type and price catalog from downloaded public source files.

Usage: python3 scripts/build_catalog.py --sources DIR [--out engine/data/catalog]

DIR holds copies of the public files named in DIR/SOURCES.json (see engine/data/catalog/README.md
for how to refresh them). Nothing here touches the network. The output is deterministic and
sorted: instance_types.csv (one row per cloud and type, CPU-only types with 0 GPUs) and
prices.csv (one row per cloud, type and region). Every row names its source and date.

Source GPU names are mapped to gpuwarden's canonical GPU model names by the explicit tables
below; a GPU name, family or machine type the tables do not know fails the build loudly.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import catalog_manual as manual  # the hand-kept tables, beside this script
import yaml

MAX_SOURCE_BYTES = 64 * 1024 * 1024  # the largest source (Azure prices) is about 3 MiB
MAX_JSON_BYTES_GZIPPED = 16 * 1024 * 1024

INSTANCE_TYPES_FILE = "instance_types.csv"
PRICES_FILE = "prices.csv"
TYPE_COLUMNS = ("cloud", "type", "kind", "gpu_model", "gpu_count", "gpu_memory_gib_each",
                "vcpus", "memory_gib", "mig_capable", "source", "as_of")
PRICE_COLUMNS = ("cloud", "type", "region", "on_demand_usd_per_h", "spot_usd_per_h",
                 "source", "as_of")


SOURCE_FIELDS = ("id", "path", "label", "as_of", "license")
SOURCES_DIR = "sources"  # beside the CSVs: SOURCES.json and each source's licence


class CatalogBuildError(Exception):
    """A source file is missing or malformed, or names something the mapping tables lack."""


@dataclass(frozen=True)
class GpuModel:
    memory_gib: float
    mig_capable: bool


# Canonical GPU models: the spelling of gpu_instances.csv / accelerators.csv where the GPU is the
# same there, nominal memory per GPU (what the vendor sells, not the driver's usable figure).
# The existing catalog spells GCP's A2/A3 GPUs without "SXM"; the GCP tables keep that spelling.
GPU_MODELS: dict[str, GpuModel] = {
    "NVIDIA K80": GpuModel(12, False),
    "NVIDIA M60": GpuModel(8, False),
    "NVIDIA P4": GpuModel(8, False),
    "NVIDIA P40": GpuModel(24, False),
    "NVIDIA P100": GpuModel(16, False),
    "NVIDIA V100": GpuModel(16, False),
    "NVIDIA V100 32GB": GpuModel(32, False),
    "NVIDIA T4": GpuModel(16, False),
    "NVIDIA T4G": GpuModel(16, False),
    "NVIDIA A10": GpuModel(24, False),
    "NVIDIA A10G": GpuModel(24, False),
    "NVIDIA L4": GpuModel(24, False),
    "NVIDIA L40S": GpuModel(48, False),
    "NVIDIA A100 40GB": GpuModel(40, True),
    "NVIDIA A100 80GB": GpuModel(80, True),
    "NVIDIA A100 40GB SXM": GpuModel(40, True),
    "NVIDIA A100 80GB SXM": GpuModel(80, True),
    "NVIDIA A100 80GB PCIe": GpuModel(80, True),
    "NVIDIA H100 80GB": GpuModel(80, True),
    "NVIDIA H100 80GB SXM": GpuModel(80, True),
    "NVIDIA H100 NVL": GpuModel(94, True),
    "NVIDIA H200 141GB": GpuModel(141, True),
    "NVIDIA B200": GpuModel(180, True),
    "NVIDIA B300": GpuModel(268, True),
    "NVIDIA GB200": GpuModel(186, True),
    "NVIDIA RTX PRO 4500 Blackwell": GpuModel(32, False),
    "NVIDIA RTX PRO 6000 Blackwell": GpuModel(96, True),
    "AMD Radeon Pro V520": GpuModel(8, False),
    "AMD Radeon PRO V710": GpuModel(24, False),
    "AMD Radeon Instinct MI25": GpuModel(16, False),
    "AMD Instinct MI300X": GpuModel(192, False),
    "Habana Gaudi HL-205": GpuModel(32, False),
}

# AWS (moto's DescribeInstanceTypes GpuInfo): (manufacturer, name, MiB of one whole GPU).
AWS_GPU_NAMES: dict[tuple[str, str, int], str] = {
    ("AMD", "Radeon Pro V520", 8192): "AMD Radeon Pro V520",
    ("Habana", "Gaudi HL-205", 32768): "Habana Gaudi HL-205",
    ("NVIDIA", "A100", 40960): "NVIDIA A100 40GB SXM",
    ("NVIDIA", "A100", 81920): "NVIDIA A100 80GB SXM",
    ("NVIDIA", "A10G", 22888): "NVIDIA A10G",
    ("NVIDIA", "B200", 183359): "NVIDIA B200",
    ("NVIDIA", "B300", 275040): "NVIDIA B300",
    ("NVIDIA", "H100", 81920): "NVIDIA H100 80GB SXM",
    ("NVIDIA", "H200", 144384): "NVIDIA H200 141GB",
    ("NVIDIA", "L4", 22888): "NVIDIA L4",
    ("NVIDIA", "L40S", 45776): "NVIDIA L40S",
    ("NVIDIA", "RTX PRO 4500", 32768): "NVIDIA RTX PRO 4500 Blackwell",
    ("NVIDIA", "RTX PRO Server 6000", 98304): "NVIDIA RTX PRO 6000 Blackwell",
    ("NVIDIA", "T4", 16384): "NVIDIA T4",
    ("NVIDIA", "T4g", 16384): "NVIDIA T4G",
    ("NVIDIA", "V100", 16384): "NVIDIA V100",
    ("NVIDIA", "V100", 32768): "NVIDIA V100 32GB",
}

# AWS types that moto's current file no longer lists come from the cluster-autoscaler table,
# which gives a GPU count but no model: the family decides the model.
AWS_FAMILY_GPU: dict[str, str] = {
    "p3": "NVIDIA V100",
    "p3dn": "NVIDIA V100 32GB",
    "g4ad": "AMD Radeon Pro V520",
    "dl1": "Habana Gaudi HL-205",
}

# GCP build/gcp.yml keys and cluster-toolkit shorthands / accelerator types.
GCP_YML_GPU_KEYS: dict[str, str] = {
    "a100": "NVIDIA A100 40GB",
    "a100-80gb": "NVIDIA A100 80GB",
    "h100-80gb": "NVIDIA H100 80GB",
    "h100-80gb-mega": "NVIDIA H100 80GB",
    "l4": "NVIDIA L4",
    "rtx6000": "NVIDIA RTX PRO 6000 Blackwell",
}
GCP_YML_OTHER_KEYS = frozenset({"cpu", "ram", "local-ssd", "type"})
GCP_TOOLKIT_GPUS: dict[str, str] = {
    "l4": "NVIDIA L4",
    "rtx-6000": "NVIDIA RTX PRO 6000 Blackwell",
    "a100-40gb": "NVIDIA A100 40GB",
    "a100-80gb": "NVIDIA A100 80GB",
    "h100-80gb": "NVIDIA H100 80GB",
    "h100-mega-80gb": "NVIDIA H100 80GB",
    "h200-141gb": "NVIDIA H200 141GB",
    "b200": "NVIDIA B200",
    "gb200": "NVIDIA GB200",
}
GCP_TOOLKIT_TPUS = frozenset({"v4", "v5p", "v5litepod", "v6e"})
GCP_ACCELERATORS: dict[str, str] = {
    "nvidia-tesla-k80": "NVIDIA K80",
    "nvidia-tesla-p4": "NVIDIA P4",
    "nvidia-tesla-p100": "NVIDIA P100",
    "nvidia-tesla-v100": "NVIDIA V100",
    "nvidia-tesla-t4": "NVIDIA T4",
    "nvidia-tesla-a100": "NVIDIA A100 40GB",
    "nvidia-a100-80gb": "NVIDIA A100 80GB",
    "nvidia-l4": "NVIDIA L4",
    "nvidia-h100-80gb": "NVIDIA H100 80GB",
    "nvidia-h100-mega-80gb": "NVIDIA H100 80GB",
    "nvidia-h200-141gb": "NVIDIA H200 141GB",
    "nvidia-b200": "NVIDIA B200",
    "nvidia-gb200": "NVIDIA GB200",
    "nvidia-rtx-pro-6000": "NVIDIA RTX PRO 6000 Blackwell",
}
GCP_VWS_SUFFIX = "-vws"  # the same GPU with an NVIDIA RTX Virtual Workstation licence
# Machine families sold with GPUs: a type of these families the sources leave unmapped fails.
GCP_GPU_FAMILIES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")
GCP_NO_LSSD_SUFFIX = "-nolssd"  # same machine without the bundled local SSD
# cluster-autoscaler says these two prices are set artificially high to steer its choice.
GCP_ARTIFICIAL_PRICES = frozenset({"e2-micro", "e2-small"})
GCP_PRICE_REGION = "us-central1"  # the autoscaler's list prices equal the us-central1 prices
GcpGpuTable = dict[str, tuple[str, Fraction]]  # machine type -> (canonical model, GPU count)

# Azure (cluster-autoscaler's SkuFamily, spelt as the Resource SKUs API spells it).
AZURE_NOT_GPU = "not a GPU"
AZURE_FAMILY_GPU: dict[str, str] = {
    "Standard NCASv3_T4 Family": "NVIDIA T4",
    "Standard NDASv4_A100 Family": "NVIDIA A100 40GB SXM",
    "StandardNCADSA100v4Family": "NVIDIA A100 80GB PCIe",
    "StandardNCADSA10v4Family": "NVIDIA A10",
    "StandardNCCads2023Family": "NVIDIA H100 NVL",
    "StandardNCadsH100v5Family": "NVIDIA H100 NVL",
    "StandardNVADSA10v5Family": "NVIDIA A10",
    "standard NDAMSv4_A100Family": "NVIDIA A100 80GB SXM",
    "standardNCFamily": "NVIDIA K80",
    "standardNCSv2Family": "NVIDIA P100",
    "standardNCSv3Family": "NVIDIA V100",
    "standardNDSFamily": "NVIDIA P40",
    "standardNDISRH200V5Family": "NVIDIA H200 141GB",
    "standardNDISv5MI300XFamily": "AMD Instinct MI300X",
    "standardNDSH100v5Family": "NVIDIA H100 80GB SXM",
    "standardNDSv2Family": "NVIDIA V100 32GB",
    "standardNVFamily": "NVIDIA M60",
    "standardNVSv2Family": "NVIDIA M60",
    "standardNVSv3Family": "NVIDIA M60",
    "standardNVSv4Family": "AMD Radeon Instinct MI25",
    "standardNPSFamily": AZURE_NOT_GPU,  # Xilinx U250 FPGAs, which the API counts as "GPUs"
}


@dataclass(frozen=True)
class Source:
    """One downloaded file: where it came from and how old its data is."""

    id: str
    path: Path
    label: str
    as_of: str
    license: Path


@dataclass(frozen=True)
class TypeRow:
    cloud: str
    type: str
    kind: str
    gpu_model: str
    gpu_count: Fraction
    vcpus: Fraction | None
    memory_gib: Fraction | None
    source: str
    as_of: str

    def key(self) -> tuple[str, str]:
        return (self.cloud, self.type.lower())


@dataclass(frozen=True)
class PriceRow:
    cloud: str
    type: str
    region: str
    on_demand: float | None
    spot: float | None
    source: str
    as_of: str

    def key(self) -> tuple[str, str, str]:
        return (self.cloud, self.type.lower(), self.region)


@dataclass
class Catalog:
    types: dict[tuple[str, str], TypeRow] = field(default_factory=dict)
    prices: dict[tuple[str, str, str], PriceRow] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: dict[str, Source] = field(default_factory=dict)

    def add_type(self, row: TypeRow) -> None:
        if row.key() in self.types:
            raise CatalogBuildError(f"{row.cloud} type {row.type} appears twice in the sources")
        self.types[row.key()] = row

    def canonical_type(self, cloud: str, name: str) -> str | None:
        row = self.types.get((cloud, name.lower()))
        return row.type if row else None

    def add_price(self, row: PriceRow) -> None:
        existing = self.prices.get(row.key())
        if existing is None:
            self.prices[row.key()] = row
        elif (existing.on_demand, existing.spot) != (row.on_demand, row.spot):
            raise CatalogBuildError(f"conflicting prices for {row.cloud} {row.type} {row.region}")


# ---------------------------------------------------------------------------------- sources


def load_manifest(sources_dir: Path) -> dict[str, Source]:
    """SOURCES.json: role -> {id, path, label, as_of, license}; paths relative to its folder."""
    manifest_path = sources_dir / "SOURCES.json"
    raw = json.loads(read_text(manifest_path))
    if not isinstance(raw, dict):
        raise CatalogBuildError(f"{manifest_path}: expected a JSON object of sources")
    sources: dict[str, Source] = {}
    for role, entry in raw.items():
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), str) for k in SOURCE_FIELDS):
            raise CatalogBuildError(f"{manifest_path}: {role} needs {', '.join(SOURCE_FIELDS)}")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["as_of"]):
            raise CatalogBuildError(f"{manifest_path}: {role} as_of is not YYYY-MM-DD")
        sources[role] = Source(entry["id"], sources_dir / entry["path"], entry["label"],
                               entry["as_of"], sources_dir / entry["license"])
    return sources


def require(sources: dict[str, Source], role: str) -> Source:
    if role not in sources:
        raise CatalogBuildError(f"SOURCES.json has no entry for {role}")
    return sources[role]


def read_bytes(path: Path) -> bytes:
    try:
        if not path.is_file():
            raise CatalogBuildError(f"{path}: not a regular file")
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise CatalogBuildError(f"{path}: larger than {MAX_SOURCE_BYTES} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise CatalogBuildError(f"{path}: {exc.strerror or exc}") from exc


def read_text(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CatalogBuildError(f"{path}: not UTF-8 text") from exc


def read_json_maybe_gzipped(path: Path) -> Any:
    data = read_bytes(path)
    if data[:2] == b"\x1f\x8b":
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            data = stream.read(MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise CatalogBuildError(f"{path}: expands past {MAX_SOURCE_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise CatalogBuildError(f"{path}: not JSON ({exc})") from exc


GO_MAP_ENTRY = re.compile(r'"([^"\n]+)":\s*([0-9]+(?:\.[0-9]+)?)')


def go_map_block(text: str, name: str, path: Path) -> dict[str, float]:
    """Entries of `name = map[string]float64{ "key": 1.5, ... }` in a generated Go data file."""
    start = re.search(rf"\b{re.escape(name)}\s*=\s*map\[string\]float64\{{", text)
    if start is None:
        raise CatalogBuildError(f"{path}: no {name} table")
    end = text.find("\n\t}", start.end())
    if end < 0:
        raise CatalogBuildError(f"{path}: {name} table is not closed")
    return {key: float(value) for key, value in GO_MAP_ENTRY.findall(text[start.end():end])}


def go_struct_rows(text: str, fields: tuple[str, ...], path: Path) -> list[dict[str, str]]:
    """Rows of a generated Go table of structs whose fields appear in the given order."""
    parts = [rf'{f}:\s*(?:"([^"\n]*)"|(-?\d+))' for f in fields]
    pattern = re.compile(r",\s*".join(parts))
    rows = [{f: match.group(2 * i + 1) if match.group(2 * i + 1) is not None
             else match.group(2 * i + 2) for i, f in enumerate(fields)}
            for match in pattern.finditer(text)]
    if not rows:
        raise CatalogBuildError(f"{path}: no {', '.join(fields)} rows found")
    return rows


def gpu_model(name: str) -> GpuModel:
    return GPU_MODELS[name]


# ---------------------------------------------------------------------------------- AWS


def aws_gpu(info: dict[str, Any], type_name: str) -> tuple[str, Fraction]:
    """Canonical model and count (a fraction for GPU partitions such as g6f) of one type."""
    gpus = info.get("Gpus") or []
    models = set()
    count = Fraction(0)
    for gpu in gpus:
        partition = Fraction(str(gpu.get("GpuPartitionSize", 1.0))).limit_denominator(64)
        mib = gpu.get("MemoryInfo", {}).get("SizeInMiB", 0)
        whole_mib = round(mib / partition) if partition else 0
        key = (str(gpu.get("Manufacturer")), str(gpu.get("Name")), whole_mib)
        if key not in AWS_GPU_NAMES:
            raise CatalogBuildError(f"aws {type_name}: unmapped GPU {key}: add it to AWS_GPU_NAMES")
        models.add(AWS_GPU_NAMES[key])
        logical = int(gpu.get("LogicalGpuCount", gpu.get("Count", 0)))
        count += int(gpu.get("Count", 0)) if partition == 1 else partition * logical
    if len(models) != 1:
        raise CatalogBuildError(f"aws {type_name}: expected one GPU model, got {sorted(models)}")
    return models.pop(), count


def aws_moto_types(source: Source) -> Iterator[TypeRow]:
    data = read_json_maybe_gzipped(source.path)
    if not isinstance(data, dict):
        raise CatalogBuildError(f"{source.path}: expected an object of instance types")
    for name, spec in data.items():
        model, count = aws_gpu(spec["GpuInfo"], name) if spec.get("GpuInfo") else ("", Fraction(0))
        yield TypeRow("aws", name, "machine", model, count,
                      Fraction(int(spec["VCpuInfo"]["DefaultVCpus"])),
                      Fraction(int(spec["MemoryInfo"]["SizeInMiB"]), 1024),
                      source.id, source.as_of)


def aws_autoscaler_types(source: Source, known: set[str]) -> Iterator[TypeRow]:
    """Types moto lacks, from cluster-autoscaler's table (GPU count, no model)."""
    rows = go_struct_rows(read_text(source.path),
                          ("InstanceType", "VCPU", "MemoryMb", "GPU", "Architecture"), source.path)
    for row in rows:
        name = row["InstanceType"]
        if name in known:
            continue
        count = Fraction(int(row["GPU"]))
        model = ""
        label = source.id
        if count:
            family = name.split(".")[0]
            if family not in AWS_FAMILY_GPU:
                raise CatalogBuildError(f"aws {name}: GPU family {family} not in AWS_FAMILY_GPU")
            model = AWS_FAMILY_GPU[family]
            label += "; GPU model: build_catalog.py family table"
        yield TypeRow("aws", name, "machine", model, count, Fraction(int(row["VCPU"])),
                      Fraction(int(row["MemoryMb"]), 1024), label, source.as_of)


def karpenter_aws_prices(source: Source) -> Iterator[tuple[str, str, float]]:
    """(region, type, on-demand price) from karpenter's generated per-region Go map."""
    region = None
    region_line = re.compile(r'^\s*"([a-z]{2}(?:-[a-z]+)+-\d)":\s*\{')
    for line in read_text(source.path).splitlines():
        match = region_line.match(line)
        if match:
            region = match.group(1)
            continue
        if region is None:
            continue
        for name, price in GO_MAP_ENTRY.findall(line):
            yield region, name, float(price)


def build_aws(sources: dict[str, Source], catalog: Catalog) -> None:
    moto = require(sources, "aws_moto_types")
    for row in aws_moto_types(moto):
        catalog.add_type(row)
    known = {row.type for row in catalog.types.values() if row.cloud == "aws"}
    for row in aws_autoscaler_types(require(sources, "aws_autoscaler_types"), known):
        catalog.add_type(row)
    for role in ("aws_karpenter_prices", "aws_karpenter_prices_gov"):
        source = require(sources, role)
        add_on_demand_prices(catalog, "aws", source, karpenter_aws_prices(source))


def add_on_demand_prices(catalog: Catalog, cloud: str, source: Source,
                         entries: Iterable[tuple[str, str, float]]) -> None:
    dropped: set[str] = set()
    for region, name, price in entries:
        if price <= 0:
            continue  # a placeholder in the source, not a price
        canonical = catalog.canonical_type(cloud, name)
        if canonical is None:
            dropped.add(name)
            continue
        catalog.add_price(PriceRow(cloud, canonical, region, price, None, source.id,
                                   source.as_of))
    if dropped:
        catalog.notes.append(f"{cloud}: {len(dropped)} priced types not in the type sources "
                             f"({source.id}), e.g. {', '.join(sorted(dropped)[:5])}")


# ---------------------------------------------------------------------------------- GCP


def parse_fraction(text: str) -> Fraction:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError) as exc:
        raise CatalogBuildError(f"not a number: {text!r}") from exc


def cyclenerd_instances(source: Source) -> dict[str, Any]:
    """The compute.instance section of one of Cyclenerd's YAML files (gcp.yml, pricing.yml)."""
    data = yaml.safe_load(read_text(source.path))
    try:
        instances = data["compute"]["instance"]
    except (TypeError, KeyError) as exc:
        raise CatalogBuildError(f"{source.path}: no compute.instance section") from exc
    if not isinstance(instances, dict):
        raise CatalogBuildError(f"{source.path}: compute.instance is not a mapping")
    return instances


def gcp_yml_gpus(source: Source) -> GcpGpuTable:
    gpus: GcpGpuTable = {}
    for name, spec in cyclenerd_instances(source).items():
        for key, value in (spec or {}).items():
            if key in GCP_YML_OTHER_KEYS:
                continue
            if key not in GCP_YML_GPU_KEYS:
                raise CatalogBuildError(f"gcp {name}: unmapped GPU key {key!r} in {source.id}")
            gpus[name] = (GCP_YML_GPU_KEYS[key], parse_fraction(str(value)))
    return gpus


def gcp_toolkit_gpus(source: Source) -> GcpGpuTable:
    """cluster-toolkit's accelerator_shorthand_map: "<gpu>-<count>" -> machine type."""
    data = read_json_maybe_gzipped(source.path)
    gpus: GcpGpuTable = {}
    for shorthand, machine in data.get("accelerator_shorthand_map", {}).items():
        gpu, _, count = shorthand.rpartition("-")
        if shorthand == machine or gpu in GCP_TOOLKIT_TPUS:
            continue
        if gpu not in GCP_TOOLKIT_GPUS:
            raise CatalogBuildError(f"gcp {machine}: unmapped GPU shorthand {shorthand!r}")
        gpus[machine] = (GCP_TOOLKIT_GPUS[gpu], parse_fraction(count))
    return gpus


def merge_gcp_gpu_tables(tables: list[tuple[Source, GcpGpuTable]]
                         ) -> tuple[GcpGpuTable, dict[str, list[str]]]:
    """One machine -> (model, count) table, and which sources gave each machine's GPUs."""
    merged: GcpGpuTable = {}
    origins: dict[str, list[str]] = {}
    for source, table in tables:
        for machine, gpu in table.items():
            if merged.get(machine, gpu) != gpu:
                raise CatalogBuildError(f"gcp {machine}: sources disagree: {merged[machine]} "
                                        f"vs {gpu}")
            merged[machine] = gpu
            origins.setdefault(machine, []).append(source.id)
    return merged, origins


def gcp_machine_gpu(name: str, table: GcpGpuTable) -> tuple[str, Fraction]:
    base = name.removesuffix(GCP_NO_LSSD_SUFFIX)
    if base in table:
        return table[base]
    if base in manual.GCP_MANUAL_GPUS:
        return manual.GCP_MANUAL_GPUS[base]
    if name.startswith(GCP_GPU_FAMILIES):
        raise CatalogBuildError(f"gcp {name}: GPU machine family without a GPU mapping")
    return "", Fraction(0)


def gcp_machine_types(source: Source, table: GcpGpuTable,
                      origins: dict[str, list[str]]) -> Iterator[TypeRow]:
    reader = csv.DictReader(io.StringIO(read_text(source.path)), delimiter=";")
    for record in reader:
        name = (record.get("NAME") or "").strip()
        if not name or name in manual.GCP_LEFT_OUT:
            continue
        model, count = gcp_machine_gpu(name, table)
        label = source.id
        if count:
            gpu_origin = origins.get(name.removesuffix(GCP_NO_LSSD_SUFFIX),
                                     ["build_catalog.py manual table (Google GPU machine types)"])
            label = f"{label}; GPU: {' + '.join(gpu_origin)}"
        yield TypeRow("gcp", name, "machine", model, count, parse_fraction(record["CPUS"]),
                      parse_fraction(record["MEMORY_GB"]), label, source.as_of)


def gcp_accelerator_types(source: Source) -> Iterator[TypeRow]:
    reader = csv.DictReader(io.StringIO(read_text(source.path)), delimiter=";")
    for name in sorted({(record.get("NAME") or "").strip() for record in reader}):
        if not name.startswith("nvidia-"):
            continue  # TPUs
        base = name.removesuffix(GCP_VWS_SUFFIX)
        if base not in GCP_ACCELERATORS:
            raise CatalogBuildError(f"gcp accelerator {name}: add it to GCP_ACCELERATORS")
        yield TypeRow("gcp", name, "accelerator", GCP_ACCELERATORS[base], Fraction(1), None, None,
                      source.id, source.as_of)


def gcp_autoscaler_prices(catalog: Catalog, source: Source) -> None:
    text = read_text(source.path)
    on_demand = go_map_block(text, "instancePrices", source.path)
    spot = go_map_block(text, "preemptiblePrices", source.path)
    on_demand |= {k: v for k, v in go_map_block(text, "gpuPrices", source.path).items() if v}
    spot |= {k: v for k, v in go_map_block(text, "preemptibleGpuPrices", source.path).items() if v}
    dropped = set()
    for name in sorted(set(on_demand) | set(spot)):
        canonical = catalog.canonical_type("gcp", name)
        if canonical is None or name in GCP_ARTIFICIAL_PRICES:
            dropped.add(name)
            continue
        catalog.add_price(PriceRow("gcp", canonical, GCP_PRICE_REGION, on_demand.get(name),
                                   spot.get(name), source.id, source.as_of))
    if dropped:
        catalog.notes.append(f"gcp: {len(dropped)} priced types left out ({source.id}): "
                             f"{', '.join(sorted(dropped))}")


def cyclenerd_price(value: Any, where: str) -> float | None:
    """One `hour`/`hour_spot` figure of pricing.yml: absent, or a positive number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6:
        raise CatalogBuildError(f"{where}: not a price: {value!r}")
    return float(value)


def cyclenerd_prices(source: Source) -> Iterator[tuple[str, str, float | None, float | None]]:
    """(type, region, on-demand, spot) per region from the `cost` of each pricing.yml entry."""
    for name, spec in cyclenerd_instances(source).items():
        costs = spec.get("cost") or {} if isinstance(spec, dict) else None
        if not isinstance(costs, dict) or not all(isinstance(c, dict) for c in costs.values()):
            raise CatalogBuildError(f"{source.path}: {name}: cost is not a mapping of regions")
        for region, cost in sorted(costs.items()):
            where = f"{source.path}: {name} {region}"
            yield (str(name), str(region), cyclenerd_price(cost.get("hour"), where),
                   cyclenerd_price(cost.get("hour_spot"), where))


def gcp_region_prices(catalog: Catalog, source: Source) -> None:
    """Per-region prices of the GPU machine types no earlier source prices: one source a type."""
    priced = {(row.cloud, row.type.lower()) for row in catalog.prices.values()}
    left_out = set()
    for name, region, on_demand, spot in cyclenerd_prices(source):
        known = catalog.types.get(("gcp", name.lower()))
        if known is None or not known.gpu_count or ("gcp", name.lower()) in priced:
            left_out.add(name)
            continue
        if on_demand is not None or spot is not None:
            catalog.add_price(PriceRow("gcp", known.type, region, on_demand, spot, source.id,
                                       source.as_of))
    if left_out:
        catalog.notes.append(f"gcp: {len(left_out)} types in {source.id} left out (priced "
                             f"already, no GPUs or unknown): {', '.join(sorted(left_out)[:8])}")


def build_gcp(sources: dict[str, Source], catalog: Catalog) -> None:
    yml = require(sources, "gcp_gpu_machine_types")
    toolkit = require(sources, "gcp_toolkit_mappings")
    table, origins = merge_gcp_gpu_tables([(yml, gcp_yml_gpus(yml)),
                                           (toolkit, gcp_toolkit_gpus(toolkit))])
    for row in gcp_machine_types(require(sources, "gcp_machine_types"), table, origins):
        catalog.add_type(row)
    for row in gcp_accelerator_types(require(sources, "gcp_accelerators")):
        catalog.add_type(row)
    gcp_autoscaler_prices(catalog, require(sources, "gcp_autoscaler_prices"))
    gcp_region_prices(catalog, require(sources, "gcp_cyclenerd_prices"))


# ---------------------------------------------------------------------------------- Azure


def azure_gpu(name: str, family: str, reported: int) -> tuple[str, Fraction, str]:
    """Model, GPU count, source note; catalog_manual.py's where the API reports none (V710)."""
    listed = manual.AZURE_MANUAL_BY_NAME.get(name.lower())
    if reported <= 0:
        return ("", Fraction(0), "") if listed is None else (
            listed.gpu_model, listed.gpu_count, f"; GPU: {listed.gpus.id}")
    if family not in AZURE_FAMILY_GPU:
        raise CatalogBuildError(f"azure {name}: GPU family {family!r} not in AZURE_FAMILY_GPU")
    model = AZURE_FAMILY_GPU[family]
    if model == AZURE_NOT_GPU:
        return "", Fraction(0), ""
    share = manual.AZURE_PARTIAL_GPU.get(name.lower())
    return model, share or Fraction(reported), "; GPU model: build_catalog.py family table" + (
        " (GPU share: Microsoft size table)" if share else "")


def azure_types(source: Source) -> Iterator[TypeRow]:
    rows = go_struct_rows(read_text(source.path),
                          ("InstanceType", "SkuFamily", "VCPU", "MemoryMb", "GPU"), source.path)
    for row in rows:
        name = row["InstanceType"]
        model, count, note = azure_gpu(name, row["SkuFamily"], int(row["GPU"]))
        yield TypeRow("azure", name, "machine", model, count, Fraction(int(row["VCPU"])),
                      Fraction(int(row["MemoryMb"]), 1024), source.id + note, source.as_of)


def karpenter_azure_prices(source: Source) -> Iterator[tuple[str, str, float]]:
    region = None
    region_line = re.compile(r'initialOnDemandPrices\["([a-z0-9]+)"\]\s*=')
    for line in read_text(source.path).splitlines():
        match = region_line.search(line)
        if match:
            region = match.group(1)
            continue
        if region is None:
            continue
        for name, price in GO_MAP_ENTRY.findall(line):
            yield region, name, float(price)


def add_azure_manual_types(catalog: Catalog) -> None:
    """catalog_manual.py's sizes the type source lacks (a newer autoscaler table wins)."""
    for size in manual.AZURE_MANUAL_SIZES:
        if catalog.canonical_type("azure", size.name) is None:
            catalog.add_type(TypeRow(
                "azure", size.name, "machine", size.gpu_model, size.gpu_count,
                Fraction(size.vcpus), Fraction(size.memory_gib),
                f"{manual.AZURE_SKU_SIZES.id}; GPU: {size.gpus.id}", manual.AZURE_SKU_SIZES.as_of))


def build_azure(sources: dict[str, Source], catalog: Catalog) -> None:
    for row in azure_types(require(sources, "azure_autoscaler_types")):
        catalog.add_type(row)
    add_azure_manual_types(catalog)
    prices = require(sources, "azure_karpenter_prices")
    entries = ((region, name, price) for region, name, price in karpenter_azure_prices(prices)
               if name.startswith(("Standard_", "Basic_")))  # not dedicated hosts
    add_on_demand_prices(catalog, "azure", prices, entries)


# ---------------------------------------------------------------------------------- output


def format_number(value: Fraction | float | None, places: int) -> str:
    if value is None:
        return ""
    text = f"{float(value):.{places}f}".rstrip("0").rstrip(".")
    return text or "0"


def type_record(row: TypeRow) -> list[str]:
    model = gpu_model(row.gpu_model) if row.gpu_model else None
    return [row.cloud, row.type, row.kind, row.gpu_model, format_number(row.gpu_count, 4),
            format_number(model.memory_gib, 2) if model else "",
            format_number(row.vcpus, 2), format_number(row.memory_gib, 3),
            "true" if model and model.mig_capable else "false", row.source, row.as_of]


def price_record(row: PriceRow) -> list[str]:
    return [row.cloud, row.type, row.region, format_number(row.on_demand, 6),
            format_number(row.spot, 6), row.source, row.as_of]


def render_csv(header: tuple[str, ...], records: Iterable[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(records)
    return out.getvalue()


def build(sources_dir: Path) -> Catalog:
    sources = load_manifest(sources_dir)
    catalog = Catalog()
    build_aws(sources, catalog)
    build_gcp(sources, catalog)
    build_azure(sources, catalog)
    catalog.sources = sources
    for row in catalog.types.values():
        if row.gpu_model and row.gpu_model not in GPU_MODELS:
            raise CatalogBuildError(f"{row.cloud} {row.type}: {row.gpu_model} not in GPU_MODELS")
    return catalog


def shipped_manifest(sources: dict[str, Source]) -> str:
    """SOURCES.json as shipped beside the CSVs: what each row's source id stands for."""
    entries = {source.id: {"label": source.label, "as_of": source.as_of,
                           "license": f"{source.license.name}"} for source in sources.values()}
    entries |= {ref.id: {"label": ref.label, "as_of": ref.as_of, "url": ref.url}
                for ref in manual.MANUAL_REFERENCES}  # figures read from a page: no file is copied
    return json.dumps(dict(sorted(entries.items())), indent=2) + "\n"


def write_provenance(sources: dict[str, Source], out_dir: Path) -> None:
    target = out_dir / SOURCES_DIR
    target.mkdir(parents=True, exist_ok=True)
    (target / "SOURCES.json").write_text(shipped_manifest(sources), encoding="utf-8")
    for license_path in sorted({source.license for source in sources.values()}):
        (target / license_path.name).write_bytes(read_bytes(license_path))


def write(catalog: Catalog, out_dir: Path) -> dict[str, int]:
    types = sorted(catalog.types.values(), key=lambda r: (r.cloud, r.type.lower(), r.type))
    prices = sorted(catalog.prices.values(), key=lambda r: (r.cloud, r.type.lower(), r.region))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / INSTANCE_TYPES_FILE).write_text(
        render_csv(TYPE_COLUMNS, (type_record(r) for r in types)), encoding="utf-8")
    (out_dir / PRICES_FILE).write_text(
        render_csv(PRICE_COLUMNS, (price_record(r) for r in prices)), encoding="utf-8")
    write_provenance(catalog.sources, out_dir)
    return {"types": len(types), "prices": len(prices)}


def summary(catalog: Catalog) -> list[str]:
    lines = []
    for cloud in ("aws", "gcp", "azure"):
        rows = [r for r in catalog.types.values() if r.cloud == cloud]
        gpu_rows = [r for r in rows if r.gpu_count]
        price_rows = [r for r in catalog.prices.values() if r.cloud == cloud]
        lines.append(f"{cloud}: {len(rows)} types ({len(gpu_rows)} with GPUs), "
                     f"{len(price_rows)} prices")
    return lines + catalog.notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sources", type=Path, required=True,
                        help="folder with SOURCES.json and the downloaded source files")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "engine/data/catalog",
                        help="folder to write instance_types.csv and prices.csv into")
    parser.add_argument("--quiet", action="store_true", help="print no summary")
    args = parser.parse_args(argv)
    try:
        catalog = build(args.sources)
        write(catalog, args.out)
    except CatalogBuildError as exc:
        print(f"build_catalog: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())  # YAML errors span lines; the CLI prints one
        print(f"build_catalog: malformed source data ({type(exc).__name__}: {detail})",
              file=sys.stderr)
        return 2
    if not args.quiet:
        print("\n".join(summary(catalog)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
