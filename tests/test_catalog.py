"""The built-in catalog (instance_types.csv + prices.csv, gpu_instances.csv as the curated
overlay), `--catalog FILE`, and "not in the catalog" as unknown, never as "no GPU"."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import Catalog, builtin_catalog, with_price_overrides
from engine.core.catalog_files import with_catalog_rows
from engine.core.catalog_tables import sorted_price_rows
from engine.core.enrich import enrich
from engine.core.errors import InputError
from engine.core.model import Category, Resource
from engine.loading.catalog_files import read_catalog_file
from engine.sources.aws import collect, instance_types, region_resources
from engine.sources.registry import ScanOptions
from tests.conftest import run_cli
from tests.conftest_aws import (
    EAST,
    WEST,
    AwsLab,
    aws_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)

FIXTURES = Path(__file__).parent / "fixtures" / "plans"
CATALOG_DIR = Path(__file__).parent.parent / "engine" / "data" / "catalog"

# Types issue 13 found ungated (missing from the old 31-row catalog), with their GPUs as the
# clouds publish them: (type, GPU model word, GPUs).
NAMED_TYPES = [
    ("g5.2xlarge", "A10G", 1),
    ("g6.4xlarge", "L4", 1),
    ("g6e.8xlarge", "L40S", 1),
    ("g5g.xlarge", "T4G", 1),
    ("p3dn.24xlarge", "V100", 8),
    ("g4dn.2xlarge", "T4", 1),
    ("a3-highgpu-8g", "H100", 8),
    ("g2-standard-8", "L4", 1),
    ("standard_nc6s_v3", "V100", 1),
    ("Standard_NC48ads_A100_v4", "A100", 2),
    ("Standard_NC96ads_A100_v4", "A100", 4),
    ("Standard_NC40ads_H100_v5", "H100", 1),
    ("Standard_NV36ads_A10_v5", "A10", 1),
]



def one_instance_plan(tmp_path: Path, instance_type: str) -> Path:
    plan = {"format_version": "1.2", "terraform_version": "1.9.0", "resource_changes": [{
        "address": "aws_instance.x", "mode": "managed", "type": "aws_instance", "name": "x",
        "provider_name": "registry.terraform.io/hashicorp/aws",
        "change": {"actions": ["create"], "before": None,
                   "after": {"instance_type": instance_type, "tags": {}}, "after_unknown": {}},
    }]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def findings_of(out: str, resource: str) -> dict[str, dict[str, Any]]:
    return {f["policy"]: f for f in json.loads(out)["findings"]
            if f["resource"]["id"].endswith(resource)}


@pytest.mark.parametrize(("name", "chip", "gpus"), NAMED_TYPES)
def test_named_types_are_known_with_their_gpus_and_priced(name: str, chip: str,
                                                           gpus: int) -> None:
    catalog = builtin_catalog()
    spec = catalog.instance(name)
    assert spec is not None, name
    assert chip in spec.gpu_model.upper().replace("-", " ").split()
    assert spec.gpu_count == gpus
    price = catalog.hourly_price(name)
    assert price is not None and price.usd_per_h > 0 and not price.estimate


def test_every_type_is_known_cpu_ones_with_no_gpus() -> None:
    catalog = builtin_catalog()
    assert catalog.knows("m5.large") and catalog.instance("m5.large") is None
    assert catalog.knows("n2-standard-8") and catalog.knows("Standard_D4s_v5")
    assert not catalog.knows("g9.mystery")
    assert catalog.instance("a4-highgpu-8g") is not None  # no public price, still GPUs
    assert len(catalog.instances) > 140  # every GPU type of the three clouds, not 31


def test_azure_sizes_match_case_insensitively_aws_and_gcp_exactly() -> None:
    catalog = builtin_catalog()
    for spelling in ("standard_nc6s_v3", "STANDARD_NC6S_V3", " Standard_NC6s_v3 "):
        spec = catalog.instance(spelling)
        assert spec is not None and spec.name == "Standard_NC6s_v3"
    assert catalog.instance("P5.48xlarge") is None
    assert catalog.instance(" p5.48xlarge ") is not None
    assert catalog.instance("A2-HIGHGPU-1G") is None


def test_two_regions_of_a_type_have_their_own_prices() -> None:
    catalog = builtin_catalog()
    east = catalog.hourly_price("Standard_NC6s_v3", "eastus")
    europe = catalog.hourly_price("standard_nc6s_v3", "westeurope")
    assert east is not None and europe is not None
    assert (east.region, europe.region) == ("eastus", "westeurope")
    assert east.usd_per_h != europe.usd_per_h and not europe.fallback


def test_a_region_without_a_price_falls_back_and_says_so() -> None:
    quote = builtin_catalog().hourly_price("g5.2xlarge", "eu-west-1")
    assert quote is not None and quote.fallback and quote.region == "us-east-1"
    assert "none for eu-west-1" in quote.basis


def test_spot_is_the_catalogs_price_where_it_has_one_else_a_labelled_estimate() -> None:
    catalog = builtin_catalog()
    gcp = catalog.hourly_price("g2-standard-8", "us-central1", "spot")
    on_demand = catalog.hourly_price("g2-standard-8", "us-central1")
    assert gcp is not None and on_demand is not None
    assert not gcp.estimate and gcp.usd_per_h < on_demand.usd_per_h
    aws = catalog.hourly_price("g5.2xlarge", "us-east-1", "spot")
    assert aws is not None and aws.estimate and "estimate" in aws.source
    assert aws.usd_per_h == pytest.approx(1.212 * (1 - catalog.spot_discount("aws")))


def test_curated_rows_fill_what_the_generated_files_lack() -> None:
    catalog = builtin_catalog()
    # a3-highgpu-8g has no price in the generated prices.csv; gpu_instances.csv has one
    a3 = catalog.hourly_price("a3-highgpu-8g")
    assert a3 is not None and a3.usd_per_h > 0
    assert catalog.newer_equivalent("p3.2xlarge") is not None
    assert catalog.mig_family("NVIDIA-H200") == "H200 141GB"
    assert catalog.accelerator("nvidia-tesla-t4") is not None
    assert catalog.accelerator("nvidia-l4") is not None


def test_prices_file_is_sorted_as_the_binary_search_needs() -> None:
    lines = (CATALOG_DIR / "prices.csv").read_text().splitlines()[1:]
    keys = [(line.split(",")[0], line.split(",")[1].lower()) for line in lines]
    assert keys == sorted(keys)
    text = (CATALOG_DIR / "prices.csv").read_text()
    assert set(sorted_price_rows(text, "aws", "p5.48xlarge")) >= {"us-east-1"}
    assert sorted_price_rows(text, "aws", "p5.48xlarg") == {}


def test_an_unknown_type_makes_gpus_unknown_not_absent() -> None:
    resource = Resource(provider="aws", kind="aws_instance", category=Category.INSTANCE,
                        id="i-1", name="x", instance_type="g9.mystery")
    enriched = enrich(resource, builtin_catalog())
    assert enriched.is_unknown("gpu")
    cpu = enrich(resource.model_copy(update={"instance_type": "m5.large"}), builtin_catalog())
    assert not cpu.is_unknown("gpu") and not cpu.has_gpu


def test_check_plan_says_unknown_and_names_a_made_up_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    plan = one_instance_plan(tmp_path, "g9.mystery")
    code, out, _ = run_cli(["check-plan", str(plan), "-f", "json"], capsys, monkeypatch)
    spot = findings_of(out, "aws_instance.x")["gpu-spot-required"]
    assert spot["result"] == "unknown"
    assert "'g9.mystery'" in spot["message"] and "--catalog" in spot["message"]
    assert code == 0  # unknown warns by default (--unknown warn)


def test_catalog_file_teaches_a_type(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    plan = one_instance_plan(tmp_path, "g9.mystery")
    rows = tmp_path / "catalog.csv"
    rows.write_text("cloud,type,gpu_model,gpu_count,gpu_memory_gib_each,on_demand_usd_per_h\n"
                    "aws,g9.mystery,NVIDIA B300,8,288,120\n")
    code, out, _ = run_cli(["check-plan", str(plan), "--catalog", str(rows), "-f", "json"],
                           capsys, monkeypatch)
    spot = findings_of(out, "aws_instance.x")["gpu-spot-required"]
    assert spot["result"] == "fail" and "8 NVIDIA B300" in spot["message"]
    assert code == 1


def test_catalog_file_rows_override_whole_types_and_price_per_region(tmp_path: Path) -> None:
    rows = tmp_path / "catalog.csv"
    rows.write_text("cloud,type,gpu_model,gpu_count,region,on_demand_usd_per_h,spot_usd_per_h\n"
                    "aws,g5.2xlarge,NVIDIA A10G,2,us-east-1,2.0,\n"
                    "aws,g5.2xlarge,NVIDIA A10G,2,eu-west-1,2.5,0.9\n"
                    "azure,Standard_NX1_v9,NVIDIA X1,1,,3.0,\n")
    catalog = read_catalog_file(builtin_catalog(), rows)
    spec = catalog.instance("g5.2xlarge")
    assert spec is not None and spec.gpu_count == 2
    east, europe = catalog.hourly_price("g5.2xlarge", "us-east-1"), catalog.hourly_price(
        "g5.2xlarge", "eu-west-1")
    assert east is not None and europe is not None
    assert (east.usd_per_h, europe.usd_per_h) == (2.0, 2.5)
    spot = catalog.hourly_price("g5.2xlarge", "eu-west-1", "spot")
    assert spot is not None and spot.usd_per_h == 0.9 and not spot.estimate
    assert catalog.instance("standard_nx1_v9") is not None  # Azure: any case
    assert builtin_catalog().instance("g5.2xlarge").gpu_count == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "why"), [
    ("type,gpu_count\nx,1\n", "needs the columns"),
    ("cloud,type,gpu_count\nmars,x,1\n", "cloud must be"),
    ("cloud,type,gpu_count\naws,x,lots\n", "gpu_count must be"),
    ("cloud,type,gpu_count\naws,x,-1\n", "gpu_count must be"),
    ("cloud,type,gpu_count\naws,x,2\n", "needs its gpu_model"),
    ("cloud,type,gpu_count,gpu_model,on_demand_usd_per_h\naws,x,1,T4,nan\n", "on_demand"),
    ("cloud,type,gpu_count\n", "no rows"),
    ("cloud,type,gpu_count\naws," + "x" * 300 + ",0\n", "printable name"),
    ("cloud,type,gpu_count\naws,\"" + "x" * 200_000 + "\",0\n", "not valid CSV"),
])
def test_bad_catalog_files_are_input_errors(text: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        with_catalog_rows(builtin_catalog(), text, "catalog.csv")


def test_a_price_file_with_an_oversized_field_is_an_input_error() -> None:
    with pytest.raises(InputError, match="not valid CSV"):
        with_price_overrides(builtin_catalog(), 'instance_type,on_demand_usd_hr\n"'
                             + "x" * 200_000 + '",1\n', "prices.csv")


def test_bad_catalog_file_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    plan = one_instance_plan(tmp_path, "g5.2xlarge")
    rows = tmp_path / "catalog.csv"
    rows.write_text("cloud,type,gpu_count\naws,x,many\n")
    code, _, err = run_cli(["check-plan", str(plan), "--catalog", str(rows)], capsys,
                           monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "catalog.csv:2" in err


def test_azure_plan_with_lower_case_size_is_a_gpu_vm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    plan = json.loads((FIXTURES / "azure-gpu-plan.json").read_text())
    changed = copy.deepcopy(plan)
    for change in changed["resource_changes"]:
        if change["address"] == "azurerm_linux_virtual_machine.trainer":
            change["change"]["after"]["size"] = "standard_nc6s_v3"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(changed))
    _, out, _ = run_cli(["check-plan", str(path), "-f", "json", "--show-passed"], capsys,
                        monkeypatch)
    trainer = findings_of(out, "azurerm_linux_virtual_machine.trainer")
    assert trainer, "the VM was not judged as a GPU VM"
    assert all(f["result"] != "unknown" or "catalog" not in f["message"]
               for f in trainer.values())
    assert any("V100" in f["message"] for f in trainer.values()) or any(
        f["estimated_monthly_usd"] > 0 for f in trainer.values())


def test_live_aws_scan_asks_ec2_once_per_type_the_catalog_lacks(
        aws: AwsLab, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime door against moto: a type missing from the catalog gets its GPUs from
    DescribeInstanceTypes, asked once for two regions and three instances."""
    monkeypatch.setattr(instance_types, "_remembered", {})
    monkeypatch.setattr(instance_types, "catalog_knows", lambda name: name != "g6e.2xlarge")
    for region, count in ((EAST, 2), (WEST, 1)):
        for _ in range(count):
            run_instance(aws.client("ec2", region), "g6e.2xlarge", {"env": "dev"})
    run_instance(aws.client("ec2", EAST), "m5.large", {})
    calls = aws.record_calls()
    catalog = Catalog()  # knows no type at all: only what EC2 answers
    collected = collect(None, ScanOptions(regions=(EAST, WEST)), catalog)
    asked = [params for _, _, operation, params in calls
             if operation == "DescribeInstanceTypes"]
    assert asked == [{"InstanceTypes": ["g6e.2xlarge"]}]
    g6e = [r for r in collected.resources if r.instance_type == "g6e.2xlarge"]
    assert len(g6e) == 3
    for resource in g6e:
        assert resource.gpu is not None and resource.gpu.count == 1
        assert "L40S" in (resource.gpu.model or "") and not resource.is_unknown("gpu")
    # m5.large was not asked about (the catalog lists it), so here it stays unknown
    [m5] = [r for r in collected.resources if r.instance_type == "m5.large"]
    assert m5.is_unknown("gpu")
    # the answers are the scan's instance_types section: a snapshot replays them, offline
    replayed = [r for scan in collected.snapshot["aws"] for r in region_resources(scan, catalog)
                if r.instance_type == "g6e.2xlarge"]
    assert len(replayed) == 3 and all(r.gpu and r.gpu.count == 1 for r in replayed)
    assert {t["InstanceType"] for scan in collected.snapshot["aws"]
            for t in scan["instance_types"]} == {"g6e.2xlarge"}
