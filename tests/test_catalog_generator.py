"""scripts/build_catalog.py: the generator on small real excerpts of its sources, and the shipped
instance_types.csv / prices.csv it produced from the full sources (engine/data/catalog)."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from engine.core.catalog import HOURS_PER_MONTH, builtin_catalog
from engine.core.costs import resource_spend
from engine.core.model import Resource

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "build_catalog.py"
FIXTURES = REPO / "tests" / "data" / "catalog-sources"
SHIPPED = REPO / "engine" / "data" / "catalog"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def load_script() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:  # as when run: catalog_manual.py sits beside it
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("build_catalog", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_catalog = load_script()


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def run_cli(sources: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--sources", str(sources), "--out",
                           str(out), "--quiet"], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def fixture_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("catalog")
    result = run_cli(FIXTURES, out)
    assert result.returncode == 0, result.stderr
    return out


def types_by_key(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(row["cloud"], row["type"]): row for row in read_csv(out / "instance_types.csv")}


def prices_by_key(out: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    return {(row["cloud"], row["type"], row["region"]): row
            for row in read_csv(out / "prices.csv")}


# ------------------------------------------------------------------ the generator on fixtures


@pytest.mark.parametrize(("cloud", "name", "expected"), [
    # moto's GpuInfo, MiB per GPU mapped to the canonical model with its nominal memory
    ("aws", "g5.2xlarge", "machine,NVIDIA A10G,1,24,8,32,false,moto-5.2.5,2026-10-27"),
    ("aws", "p3dn.24xlarge", "machine,NVIDIA V100 32GB,8,32,96,768,false,moto-5.2.5,2026-10-27"),
    ("aws", "p4d.24xlarge",
     "machine,NVIDIA A100 40GB SXM,8,40,96,1152,true,moto-5.2.5,2026-10-27"),
    ("aws", "g6f.large", "machine,NVIDIA L4,0.125,24,2,8,false,moto-5.2.5,2026-10-27"),
    ("aws", "m5.large", "machine,,0,,2,8,false,moto-5.2.5,2026-10-27"),
    # a type moto lacks: cluster-autoscaler's count, the family table's model
    ("aws", "p3.2xlarge", "machine,NVIDIA V100,1,16,8,61,false,autoscaler-aws@e964265; "
                          "GPU model: build_catalog.py family table,2026-01-22"),
    ("gcp", "a3-ultragpu-8g-nolssd", "machine,NVIDIA H200 141GB,8,141,224,2952,true,"
                                     "cyclenerd-machinetypes@8c32d22; GPU: cluster-toolkit@d26f635,"
                                     "2026-07-01"),
    ("gcp", "g4-standard-6", "machine,NVIDIA RTX PRO 6000 Blackwell,0.125,96,6,22,true,"
                             "cyclenerd-machinetypes@8c32d22; GPU: cyclenerd-gcp-yml@08440e7 + "
                             "cluster-toolkit@d26f635,2026-07-01"),
    ("gcp", "n1-standard-8", "machine,,0,,8,30,false,cyclenerd-machinetypes@8c32d22,2026-07-01"),
    ("gcp", "nvidia-tesla-t4-vws",
     "accelerator,NVIDIA T4,1,16,,,false,cyclenerd-accelerators@1c13e28,2026-08-10"),
    ("azure", "Standard_NV6ads_A10_v5",
     "machine,NVIDIA A10,0.1667,24,6,55,false,autoscaler-azure@03e49d9; GPU model: "
     "build_catalog.py family table (GPU share: Microsoft size table),2026-03-17"),
    ("azure", "Standard_NP10s", "machine,,0,,10,168,false,autoscaler-azure@03e49d9,2026-03-17"),
    # the API reports no GPUs for NVads V710 v5: the count comes from Microsoft's size page
    ("azure", "Standard_NV4ads_V710_v5", "machine,AMD Radeon PRO V710,0.1667,24,4,16,false,"
                                         "autoscaler-azure@03e49d9; GPU: "
                                         "ms-learn-nvads-v710-v5@0f864c9,2026-03-17"),
    # sizes newer than the autoscaler's table: catalog_manual.py, whatever the fixtures hold
    ("azure", "Standard_ND128isr_NDR_GB200_v6", "machine,NVIDIA GB200,4,186,128,864,true,"
                                                "aspire-aks-vm-sizes@6e81ade; GPU: "
                                                "ms-learn-nd-gb200-v6@2bc777f,2026-06-23"),
    ("azure", "Standard_NC288lds_xl_RTXPRO6000BSE_v6",
     "machine,NVIDIA RTX PRO 6000 Blackwell,2,96,288,516,true,aspire-aks-vm-sizes@6e81ade; "
     "GPU: ms-learn-ncv6-overview@2026-06-03,2026-06-23"),
])
def test_fixture_rows(fixture_output: Path, cloud: str, name: str, expected: str) -> None:
    row = types_by_key(fixture_output)[(cloud, name)]
    assert ",".join(list(row.values())[2:]) == expected


def test_fixture_row_set(fixture_output: Path) -> None:
    names = {name for _, name in types_by_key(fixture_output)}
    assert "ct5lp-hightpu-4t" in names  # a TPU machine type is a type, with 0 GPUs
    assert "ct5lp" not in names  # but a TPU accelerator is no GPU accelerator
    assert len(names) == 32 + len(build_catalog.manual.AZURE_MANUAL_SIZES) - 1  # NV4ads: both


def test_fixture_prices(fixture_output: Path) -> None:
    prices = prices_by_key(fixture_output)
    assert list(prices[("aws", "p3.2xlarge", "us-east-1")].values())[3:] == [
        "3.06", "", "karpenter-aws@6fc13b5", "2026-07-20"]
    assert prices[("aws", "g6.4xlarge", "us-gov-east-1")]["on_demand_usd_per_h"] == "1.66781"
    gcp = prices[("gcp", "a2-highgpu-1g", "us-central1")]
    assert (gcp["on_demand_usd_per_h"], gcp["spot_usd_per_h"]) == ("3.673385", "1.102016")
    assert prices[("gcp", "nvidia-tesla-t4", "us-central1")]["spot_usd_per_h"] == "0.11"
    assert prices[("azure", "Standard_NC6s_v3", "westeurope")]["on_demand_usd_per_h"] == "3.823"
    assert prices[("azure", "Standard_ND128isr_NDR_GB200_v6", "eastus")][
        "on_demand_usd_per_h"] == "108.16"
    assert prices[("azure", "Standard_NV4ads_V710_v5", "westeurope")][
        "on_demand_usd_per_h"] == "0.433"
    skipped = {("gcp", "e2-small"), ("gcp", "nvidia-tesla-a100"), ("gcp", "nvidia-tesla-k80"),
               ("azure", "Basic_A0"), ("azure", "DCadsv6_Type1"), ("aws", "g5.12xlarge")}
    assert not skipped & {(cloud, name) for cloud, name, _ in prices}
    assert len(prices) == 29


def test_fixture_region_prices_fill_only_unpriced_gpu_types(fixture_output: Path) -> None:
    """Cyclenerd's pricing.yml prices per region the GPU machine types the autoscaler lacks;
    a2-highgpu-1g, which the autoscaler prices, keeps that source alone."""
    prices = prices_by_key(fixture_output)
    assert list(prices[("gcp", "a3-highgpu-8g", "us-central1")].values())[3:] == [
        "88.49", "50.609541", "cyclenerd-pricing@fd66b26", "2026-07-30"]
    assert prices[("gcp", "a3-highgpu-8g", "us-east4")]["on_demand_usd_per_h"] == "88.555756"
    assert prices[("gcp", "a3-megagpu-8g", "us-east4")]["on_demand_usd_per_h"] == "92.937588"
    assert prices[("gcp", "g4-standard-6", "us-central1")]["spot_usd_per_h"] == "0.223803"
    a2 = {region: row["source"] for (cloud, name, region), row in prices.items()
          if name == "a2-highgpu-1g"}
    assert a2 == {"us-central1": "autoscaler-gce-prices@e72c7c6"}
    unpriced = {"a3-edgegpu-8g", "a3-ultragpu-8g-nolssd"}  # in neither source
    assert not unpriced & {name for _, name, _ in prices}


def test_fixture_provenance_is_copied(fixture_output: Path) -> None:
    manifest = json.loads((fixture_output / "sources" / "SOURCES.json").read_text())
    copied = {key: entry for key, entry in manifest.items() if "license" in entry}
    for entry in copied.values():
        assert (fixture_output / "sources" / entry["license"]).read_text().startswith(
            (" ", "\n", "Apache"))
    assert manifest["moto-5.2.5"]["as_of"] == "2026-10-27"
    # the hand-kept tables' pages: read, not copied, so a link and a date instead of a licence
    read = {key: entry for key, entry in manifest.items() if key not in copied}
    assert set(read) == {ref.id for ref in build_catalog.manual.MANUAL_REFERENCES}
    for entry in read.values():
        assert entry["url"].startswith("https://") and DATE.fullmatch(entry["as_of"])


def test_output_is_deterministic(fixture_output: Path, tmp_path: Path) -> None:
    assert run_cli(FIXTURES, tmp_path).returncode == 0
    for name in ("instance_types.csv", "prices.csv", "sources/SOURCES.json"):
        assert (tmp_path / name).read_bytes() == (fixture_output / name).read_bytes()


# ------------------------------------------------------------------ loud failures


def edited_sources(tmp_path: Path, relative: str, old: str, new: str) -> Path:
    sources = tmp_path / "sources"
    shutil.copytree(FIXTURES, sources)
    path = sources / relative
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return sources


@pytest.mark.parametrize(("relative", "old", "new", "message"), [
    ("aws/instance_types.json", '"Name": "L40S"', '"Name": "Z100"', "unmapped GPU"),
    ("azure/azure_instance_types.go", "standardNCSv3Family", "standardNZv9Family",
     "not in AZURE_FAMILY_GPU"),
    ("gcp/gcp.yml", "      l4: 1", "      x9: 1", "unmapped GPU key 'x9'"),
    ("gcp/machine_mappings.json", '"h200-141gb-8"', '"h300-200gb-8"', "unmapped GPU shorthand"),
    ("gcp/gcp.yml", "      h100-80gb-mega: 8", "      h100-80gb-mega: 4", "sources disagree"),
    ("gcp/machinetypes.csv", "n1-standard-8;", "a4-highgpu-16g;", "without a GPU mapping"),
    ("gcp/acceleratortyperegion.csv", "nvidia-h200-141gb;", "nvidia-x300;",
     "add it to GCP_ACCELERATORS"),
    ("aws/ec2_instance_types.go", '"p3.2xlarge",', '"p9.2xlarge",', "not in AWS_FAMILY_GPU"),
    ("SOURCES.json", '"aws/zz_generated.pricing_aws.go"', '"aws/absent.go"', "not a regular file"),
    ("SOURCES.json", '"as_of": "2026-06-18"', '"as_of": "June"', "as_of is not YYYY-MM-DD"),
    ("gcp/gce_price_info.go", "preemptiblePrices =", "otherPrices =", "no preemptiblePrices"),
    ("gcp/pricing.yml", "hour: 88.4899999025753", "hour: '88.49'", "not a price: '88.49'"),
    ("gcp/pricing.yml", "hour: 0.55955625", "hour: -1", "g4-standard-6 us-central1: not a price"),
    ("gcp/pricing.yml", "    a3-megagpu-8g:\n      cost:",
     "    a3-megagpu-8g:\n      cost: 1\n      x:", "a3-megagpu-8g: cost is not a mapping"),
    ("gcp/pricing.yml", "        us-east4:\n          hour: 92", "        us-east4: 92\n#",
     "malformed source data (ParserError: while parsing a block mapping in"),
    ("gcp/pricing.yml", "    a3-megagpu-8g:\n      cost:\n        us-east4:\n",
     "    a3-megagpu-8g:\n      cost:\n        us-east4: 9\n        x:\n",
     "a3-megagpu-8g: cost is not a mapping of regions"),
    ("gcp/pricing.yml", "    a3-megagpu-8g:\n      cost:\n",
     "    a3-megagpu-8g: [1]\n    x:\n      cost:\n", "a3-megagpu-8g: cost is not a mapping"),
    ("gcp/pricing.yml", "compute:\n  instance:", "compute:\n  instances:",
     "no compute.instance section"),
])
def test_unknown_or_broken_source_fails_loudly(tmp_path: Path, relative: str, old: str, new: str,
                                               message: str) -> None:
    result = run_cli(edited_sources(tmp_path, relative, old, new), tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("build_catalog: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "instance_types.csv").exists()


def test_malformed_json_source_is_one_line(tmp_path: Path) -> None:
    sources = edited_sources(tmp_path, "aws/instance_types.json", "{", "[")
    result = run_cli(sources, tmp_path / "out")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


# ------------------------------------------------------------------ the shipped catalog


@pytest.fixture(scope="module")
def shipped_types() -> list[dict[str, str]]:
    return read_csv(SHIPPED / "instance_types.csv")


@pytest.fixture(scope="module")
def shipped_prices() -> list[dict[str, str]]:
    return read_csv(SHIPPED / "prices.csv")


@pytest.fixture(scope="module")
def shipped_sources() -> dict[str, dict[str, str]]:
    manifest: dict[str, dict[str, str]] = json.loads(
        (SHIPPED / "sources" / "SOURCES.json").read_text())
    return manifest


def lookup(types: list[dict[str, str]], cloud: str, name: str) -> dict[str, str]:
    """Case-insensitive, as Azure matches VM sizes."""
    matches = [r for r in types if r["cloud"] == cloud and r["type"].lower() == name.lower()]
    assert len(matches) == 1, (cloud, name, matches)
    return matches[0]


def test_shipped_files_parse_with_their_columns(shipped_types: list[dict[str, str]],
                                                shipped_prices: list[dict[str, str]]) -> None:
    assert tuple(shipped_types[0]) == build_catalog.TYPE_COLUMNS
    assert tuple(shipped_prices[0]) == build_catalog.PRICE_COLUMNS
    for row in shipped_types:
        assert float(row["gpu_count"]) >= 0 and row["kind"] in {"machine", "accelerator"}
        assert row["mig_capable"] in {"true", "false"}
        assert bool(row["gpu_model"]) == (float(row["gpu_count"]) > 0)
        if row["gpu_model"]:
            model = build_catalog.GPU_MODELS[row["gpu_model"]]
            assert float(row["gpu_memory_gib_each"]) == model.memory_gib
            assert (row["mig_capable"] == "true") == model.mig_capable
    for row in shipped_prices:
        assert row["on_demand_usd_per_h"] or row["spot_usd_per_h"]
        assert all(float(v) > 0 for v in (row["on_demand_usd_per_h"], row["spot_usd_per_h"]) if v)


def test_shipped_keys_are_unique_and_sorted(shipped_types: list[dict[str, str]],
                                            shipped_prices: list[dict[str, str]]) -> None:
    type_keys = [(r["cloud"], r["type"].lower()) for r in shipped_types]
    price_keys = [(r["cloud"], r["type"].lower(), r["region"]) for r in shipped_prices]
    assert len(set(type_keys)) == len(type_keys) and type_keys == sorted(type_keys)
    assert len(set(price_keys)) == len(price_keys) and price_keys == sorted(price_keys)
    assert {k[:2] for k in price_keys} <= set(type_keys)  # every price belongs to a known type


def test_every_shipped_row_has_a_source_and_date(shipped_types: list[dict[str, str]],
                                                 shipped_prices: list[dict[str, str]],
                                                 shipped_sources: dict[str, dict[str, str]]
                                                 ) -> None:
    for row in [*shipped_types, *shipped_prices]:
        assert DATE.fullmatch(row["as_of"]), row
        assert row["source"].split(";")[0] in shipped_sources, row
    for entry in shipped_sources.values():
        assert DATE.fullmatch(entry["as_of"])
        if "license" in entry:  # a copied file; else a page figures were read from
            assert "Apache License" in (SHIPPED / "sources" / entry["license"]).read_text()
        else:
            assert entry["url"].startswith("https://learn.microsoft.com/") or entry[
                "url"].startswith("https://github.com/")


def test_existing_gpu_instances_agree(shipped_types: list[dict[str, str]]) -> None:
    for old in read_csv(SHIPPED / "gpu_instances.csv"):
        new = lookup(shipped_types, old["cloud"], old["instance_type"])
        assert new["type"] == old["instance_type"]
        assert new["gpu_model"] == old["gpu_model"]
        assert float(new["gpu_count"]) == float(old["gpu_count"])
        assert float(new["gpu_memory_gib_each"]) == float(old["gpu_mem_gib_each"])
        assert (float(new["vcpus"]), float(new["memory_gib"])) == (
            float(old["vcpu"]), float(old["mem_gib"]))


def test_existing_accelerators_agree(shipped_types: list[dict[str, str]]) -> None:
    for old in read_csv(SHIPPED / "accelerators.csv"):
        new = lookup(shipped_types, old["cloud"], old["accelerator"])
        assert (new["kind"], new["gpu_model"]) == ("accelerator", old["gpu_model"])
        assert float(new["gpu_memory_gib_each"]) == float(old["gpu_mem_gib_each"])


@pytest.mark.parametrize(("cloud", "name", "gpus"), [
    ("aws", "g5.2xlarge", 1), ("aws", "g6.4xlarge", 1), ("aws", "g6e.8xlarge", 1),
    ("aws", "g5g.xlarge", 1), ("aws", "p3dn.24xlarge", 8), ("aws", "p5e.48xlarge", 8),
    ("gcp", "a3-highgpu-8g", 8), ("gcp", "a3-megagpu-8g", 8), ("gcp", "g2-standard-8", 1),
    ("azure", "Standard_NC6s_v3", 1), ("azure", "standard_nc48ads_a100_v4", 2),
    ("azure", "STANDARD_NC40ADS_H100_V5", 1), ("azure", "Standard_NV36ads_A10_v5", 1),
    ("azure", "Standard_ND128isr_NDR_GB200_v6", 4), ("azure", "standard_nv12ads_v710_v5", 0.5),
    ("azure", "Standard_NC144ds_xl_RTXPRO6000BSE_v6", 1),
])
def test_named_types_have_their_gpus(shipped_types: list[dict[str, str]], cloud: str, name: str,
                                     gpus: float) -> None:
    assert float(lookup(shipped_types, cloud, name)["gpu_count"]) == gpus


def test_gpu_machine_types_without_a_price_are_the_known_gaps(
        shipped_types: list[dict[str, str]], shipped_prices: list[dict[str, str]]) -> None:
    """No public price source reachable when the catalog was built prices these (README:
    "Left out or known gaps"); a type newly missing a price fails here."""
    priced = {(r["cloud"], r["type"].lower()) for r in shipped_prices}
    unpriced = {(r["cloud"], r["type"]) for r in shipped_types
                if r["kind"] == "machine" and float(r["gpu_count"])
                and (r["cloud"], r["type"].lower()) not in priced}
    assert unpriced == {("aws", "p5e.48xlarge"), ("gcp", "a3-edgegpu-8g"),
                        ("gcp", "a3-edgegpu-8g-nolssd"), ("gcp", "a3-ultragpu-8g"),
                        ("gcp", "a3-ultragpu-8g-nolssd"), ("gcp", "a4-highgpu-8g"),
                        ("gcp", "a4x-highgpu-4g")}


def test_hand_kept_azure_sizes_are_shipped_with_their_sources(
        shipped_types: list[dict[str, str]], shipped_prices: list[dict[str, str]],
        shipped_sources: dict[str, dict[str, str]]) -> None:
    """catalog_manual.py's N-series sizes: the figures of its table, each row naming the page its
    GPUs were read from (in the shipped SOURCES.json), and every one priced by Karpenter."""
    priced = {r["type"] for r in shipped_prices if r["cloud"] == "azure"}
    for size in build_catalog.manual.AZURE_MANUAL_SIZES:
        row = lookup(shipped_types, "azure", size.name)
        assert (row["gpu_model"], float(row["gpu_count"])) == (
            size.gpu_model, pytest.approx(float(size.gpu_count), abs=1e-4))
        # where the autoscaler lists the size too (V710) its API figures are the table's
        assert (float(row["vcpus"]), float(row["memory_gib"])) == (size.vcpus, size.memory_gib)
        specs, gpus = row["source"].split("; GPU: ")
        assert gpus == size.gpus.id and {specs, gpus} <= set(shipped_sources)
        assert size.name in priced
    labels = [lookup(shipped_types, "azure", s.name)["source"]
              for s in build_catalog.manual.AZURE_MANUAL_SIZES]
    assert sum(label.startswith("autoscaler-azure@") for label in labels) == 5  # NVads V710 v5


def test_a_gb200_row_prices_the_gb200_machines_that_have_no_list_price(
        make_resource: Callable[..., Resource]) -> None:
    """GCP's a4x-highgpu-4g has no published price; its four GB200 are priced at the cheapest
    catalog $/GPU-hour of the model: Azure's ND128isr_NDR_GB200_v6 (4 GPUs) at 108.16/h."""
    catalog = builtin_catalog()
    assert catalog.gpu_hourly("NVIDIA GB200") == pytest.approx(108.16 / 4)
    machine = make_resource(provider="gcp", kind="google_compute_instance",
                            instance_type="a4x-highgpu-4g", region="us-central1",
                            capacity="on-demand")
    assert machine.gpu is not None and machine.gpu.count == 4 and machine.hourly_usd is None
    spend = resource_spend(machine, catalog)
    assert spend.monthly_usd == pytest.approx(108.16 * HOURS_PER_MONTH)
    assert "NVIDIA GB200" in spend.basis and "$27.04/GPU-h" in spend.basis
    assert spend.basis.startswith("no list price for a4x-highgpu-4g, estimated as 4 × ")


def test_shipped_region_prices_agree_with_the_curated_row(
        shipped_prices: list[dict[str, str]]) -> None:
    rows = {r["region"]: r for r in shipped_prices
            if (r["cloud"], r["type"]) == ("gcp", "a3-highgpu-8g")}
    curated = lookup_curated("gcp", "a3-highgpu-8g")
    assert float(rows[curated["region"]]["on_demand_usd_per_h"]) == float(
        curated["on_demand_usd_hr"])
    assert rows["us-central1"]["source"] == "cyclenerd-pricing@fd66b26"
    assert len(rows) == 40  # one per region pricing.yml names


def lookup_curated(cloud: str, name: str) -> dict[str, str]:
    return next(r for r in read_csv(SHIPPED / "gpu_instances.csv")
                if (r["cloud"], r["instance_type"]) == (cloud, name))


def test_coverage_of_gpu_families_and_cpu_types(shipped_types: list[dict[str, str]]) -> None:
    aws = {r["type"].split(".")[0] for r in shipped_types if r["cloud"] == "aws"
           and float(r["gpu_count"])}
    assert {"g4dn", "g4ad", "g5", "g5g", "g6", "g6e", "g6f", "gr6", "g7e", "p3", "p3dn", "p4d",
            "p4de", "p5", "p5e", "p5en", "p6-b200"} <= aws
    gcp = {r["type"] for r in shipped_types if r["cloud"] == "gcp" and float(r["gpu_count"])}
    for prefix in ("a2-highgpu", "a2-ultragpu", "a3-highgpu", "a3-ultragpu", "a4-highgpu",
                   "g2-standard", "nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100",
                   "nvidia-tesla-p4"):
        assert any(name.startswith(prefix) for name in gcp), prefix
    azure = {r["type"] for r in shipped_types if r["cloud"] == "azure" and float(r["gpu_count"])}
    for prefix in ("Standard_NC", "Standard_ND", "Standard_NV"):
        assert sum(name.startswith(prefix) for name in azure) >= 6, prefix
    for cloud, name in [("aws", "m5.large"), ("gcp", "n1-standard-8"),
                        ("azure", "Standard_D2s_v3")]:
        assert lookup(shipped_types, cloud, name)["gpu_count"] == "0"
    assert len(shipped_types) > 3000


def test_shipped_files_stay_small() -> None:
    total = sum(p.stat().st_size for p in SHIPPED.rglob("*") if p.is_file())
    assert total < 10 * 1024 * 1024
