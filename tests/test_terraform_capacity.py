"""Prepaid and reserved capacity, GKE zone counts, AKS cost tags and module-call locations
(issue 13, parts 6 and 7).

- A real `terraform show -json` of an AWS configuration (tests/data/terraform-capacity: Terraform
  1.11.4, hashicorp/aws 5.100.0 from the local plugin mirror, `plan -refresh=false`, no API call):
  an instance in an On-Demand Capacity Reservation, one with only `preference = "open"`, a
  Capacity Block launch template, an EKS `CAPACITY_BLOCK` node group, an autoscaling group
  launching only into the reservation (from a plain template) and an instance inside a local
  module.
- Hand-written plans in the same shape for GCP and Azure (their providers are not mirrored here).
- Live AWS shapes (DescribeInstances, DescribeLaunchTemplateVersions, DescribeNodegroup).

The expected verdicts were written before the code was run on these inputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.model import Capacity, Resource, SourceLocation
from engine.sources.aws import region_resources
from engine.sources.terraform import plan_resources
from tests.test_cli import run_cli
from tests.test_sarif_validation import (
    INSTALL_HINT,
    MULTITOOL,
    SCHEMA_PACKAGE,
    node_tools,
    run_multitool,
    schema_errors,
)

DATA = Path(__file__).parent / "data" / "terraform-capacity"


def resources_of(plan: dict[str, Any]) -> dict[str, Resource]:
    return {r.id: r for r in plan_resources(plan, "plan.json", builtin_catalog())}


def check_plan(plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, Any]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    code, out, _ = run_cli(["check-plan", str(path), "-f", "json", *extra], capsys, monkeypatch)
    return code, json.loads(out)


def verdicts(report: dict[str, Any], policy: str) -> dict[str, str]:
    return {f["resource"]["id"]: f["result"] for f in report["findings"] if f["policy"] == policy}


# ---------------------------------------------------------------------------- a real AWS plan


@pytest.fixture(scope="module")
def real_plan() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / "plan.json").read_text("utf-8"))
    return loaded


def test_real_aws_plan_capacity(real_plan: dict[str, Any]) -> None:
    found = resources_of(real_plan)
    reserved = found["aws_instance.reserved"]  # target = a reservation created in the same apply
    assert reserved.capacity == Capacity.RESERVED and "capacity" not in reserved.unknown
    assert found["aws_instance.open_only"].capacity == Capacity.ON_DEMAND  # "open" alone
    assert found["aws_launch_template.block"].capacity == Capacity.RESERVED
    node_group = found["aws_eks_node_group.block"]
    assert (node_group.capacity, node_group.count, node_group.instance_type) == (
        Capacity.RESERVED, 2, "p5e.48xlarge")
    assert found["module.gpu.aws_instance.trainer"].capacity == Capacity.ON_DEMAND
    group = found["aws_autoscaling_group.odcr"]  # its own capacity_reservation_specification
    assert (group.capacity, group.count) == (Capacity.RESERVED, 2)
    assert found["aws_launch_template.plain"].capacity == Capacity.ON_DEMAND


def test_real_aws_plan_spot_policy_passes_reserved_with_the_reason(
    real_plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, report = check_plan(real_plan, tmp_path, capsys, monkeypatch, "--show-passed")
    spot = {f["resource"]["id"]: f for f in report["findings"]
            if f["policy"] == "gpu-spot-required"}
    for address in ("aws_instance.reserved", "aws_launch_template.block",
                    "aws_eks_node_group.block", "aws_autoscaling_group.odcr"):
        assert spot[address]["result"] == "pass", address
        assert "prepaid/reserved capacity" in spot[address]["message"]
        assert "spot would save" not in spot[address]["message"]
        assert spot[address]["estimated_monthly_usd"] == 0
    assert spot["aws_instance.open_only"]["result"] == "fail"
    assert spot["module.gpu.aws_instance.trainer"]["result"] == "fail"


def test_real_aws_plan_without_show_passed_lists_no_spot_finding_for_reserved(
    real_plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, report = check_plan(real_plan, tmp_path, capsys, monkeypatch)
    assert code == 1  # the on-demand ones still deny
    assert verdicts(report, "gpu-spot-required") == {
        "aws_instance.open_only": "fail", "module.gpu.aws_instance.trainer": "fail",
        "aws_launch_template.plain": "fail"}  # the template alone is on-demand


def test_tf_dir_points_a_module_finding_at_the_module_call(
    real_plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(DATA.parent)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(real_plan))
    args = ["check-plan", str(path), "--tf-dir", "terraform-capacity"]
    _, out, _ = run_cli([*args, "-f", "json"], capsys, monkeypatch)
    findings = [f for f in json.loads(out)["findings"] if f["policy"] == "gpu-spot-required"]
    by_id = {f["resource"]["id"]: f["location"] for f in findings}
    call_line = _line_of(DATA / "main.tf", 'module "gpu" {')
    assert by_id["module.gpu.aws_instance.trainer"] == {
        "file": "terraform-capacity/main.tf", "line": call_line,
        "definition": {"file": "terraform-capacity/modules/gpu/main.tf", "line": 1}}
    assert by_id["aws_instance.open_only"] == {  # a root resource: its own block, no definition
        "file": "terraform-capacity/main.tf",
        "line": _line_of(DATA / "main.tf", 'resource "aws_instance" "open_only" {')}

    _, out, _ = run_cli([*args, "-f", "sarif"], capsys, monkeypatch)
    results = json.loads(out)["runs"][0]["results"]
    module_result = next(r for r in results if r["ruleId"] == "gpu-spot-required"
                         and "module.gpu" in r["message"]["text"])
    physical = module_result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "terraform-capacity/main.tf"
    assert physical["region"]["startLine"] == call_line
    related = module_result["relatedLocations"][0]["physicalLocation"]
    assert related["artifactLocation"]["uri"] == "terraform-capacity/modules/gpu/main.tf"
    assert related["region"]["startLine"] == 1
    root_result = next(r for r in results if r["ruleId"] == "gpu-spot-required"
                       and "open_only" in r["message"]["text"])
    assert "relatedLocations" not in root_result


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
                if line.startswith(text))


# ---------------------------------------------------------------------------- plan builder


def plan_of(*changes: tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]
            ) -> dict[str, Any]:
    """A plan in `terraform show -json` shape from (address, provider, after, after_unknown,
    configured expressions) per created resource of the root module."""
    resource_changes, configured = [], []
    for address, provider, after, unknown, expressions in changes:
        type_, name = address.split(".")
        resource_changes.append({
            "address": address, "mode": "managed", "type": type_, "name": name,
            "provider_name": f"registry.terraform.io/hashicorp/{provider}",
            "change": {"actions": ["create"], "before": None, "after": after,
                       "after_unknown": unknown, "before_sensitive": False,
                       "after_sensitive": {}}})
        configured.append({"address": address, "mode": "managed", "type": type_, "name": name,
                           "provider_config_key": provider, "expressions": expressions})
    return {"format_version": "1.2", "terraform_version": "1.11.4",
            "planned_values": {"root_module": {}}, "resource_changes": resource_changes,
            "configuration": {"root_module": {"resources": configured}},
            "applyable": True, "complete": True, "errored": False}


def const(value: Any) -> dict[str, Any]:
    return {"constant_value": value}


TAGS = {"team": "research", "project": "llm", "cost-center": "cc-42", "env": "dev"}
LABELS = {"team": "research", "project": "llm", "cost-center": "cc-42", "env": "dev"}


# ---------------------------------------------------------------------------- AWS (hand-written)


def aws_instance(address: str, extra: dict[str, Any], unknown: dict[str, Any],
                 expressions: dict[str, Any], tags: dict[str, str] | None = None
                 ) -> tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    tags = TAGS if tags is None else tags
    after = {"ami": "ami-0123456789abcdef0", "instance_type": "p5.48xlarge", "tags": tags,
             "tags_all": tags, **extra}
    return (address, "aws", after, unknown,
            {"instance_type": const("p5.48xlarge"), "tags": const(tags), **expressions})


def test_a_reserved_instance_without_cost_tags_still_fails_the_tag_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = "arn:aws:resource-groups:us-east-1:123456789012:group/p5-odcr"
    target = [{"capacity_reservation_id": None, "capacity_reservation_resource_group_arn": group}]
    spec = [{"capacity_reservation_preference": None, "capacity_reservation_target": target}]
    plan = plan_of(aws_instance(
        "aws_instance.untagged", {"capacity_reservation_specification": spec},
        {"capacity_reservation_specification": [{"capacity_reservation_target": [{}]}]},
        {"capacity_reservation_specification": [{"capacity_reservation_target": [
            {"capacity_reservation_resource_group_arn": const(group)}]}]},
        tags={"env": "dev"}))
    _, report = check_plan(plan, tmp_path, capsys, monkeypatch)
    assert "aws_instance.untagged" not in verdicts(report, "gpu-spot-required")
    assert verdicts(report, "required-cost-tags")["aws_instance.untagged"] == "fail"


def test_a_reservation_block_not_known_yet_is_unknown_not_on_demand() -> None:
    plan = plan_of(aws_instance(
        "aws_instance.later", {"capacity_reservation_specification": None},
        {"capacity_reservation_specification": True},
        {"capacity_reservation_specification": [{"capacity_reservation_target": [
            {"capacity_reservation_id": {"references": ["var.reservation"]}}]}]}))
    resource = resources_of(plan)["aws_instance.later"]
    assert resource.capacity == Capacity.UNKNOWN and "capacity" in resource.unknown


def test_spot_wins_over_an_unknown_reservation() -> None:
    plan = plan_of(aws_instance(
        "aws_instance.spot",
        {"capacity_reservation_specification": None,
         "instance_market_options": [{"market_type": "spot", "spot_options": []}]},
        {"capacity_reservation_specification": True},
        {"capacity_reservation_specification": [{"capacity_reservation_target": [
            {"capacity_reservation_id": {"references": ["var.reservation"]}}]}],
         "instance_market_options": [{"market_type": const("spot")}]}))
    assert resources_of(plan)["aws_instance.spot"].capacity == Capacity.SPOT


# ---------------------------------------------------------------------------- GCP


def gce(name: str, **extra: Any) -> tuple[str, str, dict[str, Any], dict[str, Any],
                                          dict[str, Any]]:
    after = {"name": name, "machine_type": "a2-highgpu-1g", "zone": "us-central1-a",
             "labels": LABELS, "terraform_labels": LABELS, "effective_labels": LABELS, **extra}
    return (f"google_compute_instance.{name}", "google", after, {"id": True},
            {key: const(value) for key, value in after.items()})


def test_gce_specific_reservation_and_flex_start_are_reserved() -> None:
    specific = [{"type": "SPECIFIC_RESERVATION", "specific_reservation": [
        {"key": "compute.googleapis.com/reservation-name", "values": ["a100-res"]}]}]
    found = resources_of(plan_of(
        gce("specific", reservation_affinity=specific),
        gce("any", reservation_affinity=[{"type": "ANY_RESERVATION", "specific_reservation": []}]),
        gce("flex", scheduling=[{"provisioning_model": "FLEX_START", "preemptible": False,
                                 "max_run_duration": [{"seconds": 86400, "nanos": 0}]}]),
        gce("standard", scheduling=[{"provisioning_model": "STANDARD", "preemptible": False}]),
    ))
    assert found["google_compute_instance.specific"].capacity == Capacity.RESERVED
    assert found["google_compute_instance.any"].capacity == Capacity.ON_DEMAND
    assert found["google_compute_instance.flex"].capacity == Capacity.RESERVED
    assert found["google_compute_instance.standard"].capacity == Capacity.ON_DEMAND


def node_pool(name: str, node_config: dict[str, Any], unknown: dict[str, Any] | None = None,
              **pool: Any) -> tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    node = {"machine_type": "g2-standard-8", "labels": LABELS, "spot": False,
            "preemptible": False, **node_config}
    after = {"name": name, "cluster": "train", "location": "us-central1-a", "node_count": 2,
             "node_config": [node], **pool}
    expressions = {key: const(value) for key, value in after.items() if key != "node_config"}
    expressions["node_config"] = [{key: const(value) for key, value in node.items()}]
    return (f"google_container_node_pool.{name}", "google", after, unknown or {}, expressions)


def test_gke_reservations_flex_start_and_queued_provisioning_are_reserved() -> None:
    specific = [{"consume_reservation_type": "SPECIFIC_RESERVATION",
                 "key": "compute.googleapis.com/reservation-name", "values": ["l4-res"]}]
    found = resources_of(plan_of(
        node_pool("specific", {"reservation_affinity": specific}),
        node_pool("any", {"reservation_affinity": [
            {"consume_reservation_type": "ANY_RESERVATION", "key": None, "values": None}]}),
        node_pool("flex", {"flex_start": True}),
        node_pool("queued", {}, queued_provisioning=[{"enabled": True}]),
        node_pool("plain", {}),
    ))
    capacities = {address.split(".")[1]: r.capacity for address, r in found.items()}
    assert capacities == {"specific": Capacity.RESERVED, "any": Capacity.ON_DEMAND,
                          "flex": Capacity.RESERVED, "queued": Capacity.RESERVED,
                          "plain": Capacity.ON_DEMAND}


def test_gke_regional_pools_count_nodes_per_zone() -> None:
    computed = {"node_locations": True}
    cluster_zones = ["us-east1-b", "us-east1-c", "us-east1-d"]
    cluster = ("google_container_cluster.zonal", "google",
               {"name": "zonal", "location": "us-east1-b", "node_locations": ["us-east1-c"]},
               {}, {"location": const("us-east1-b"), "node_locations": const(["us-east1-c"])})
    via_cluster = node_pool("via_cluster", {}, computed, location=None, node_locations=None)
    via_cluster[4]["cluster"] = {"references": ["google_container_cluster.zonal.name",
                                                "google_container_cluster.zonal"]}
    via_cluster[4].pop("location")
    unknown_location = node_pool("unknown_location", {}, {**computed, "location": True},
                                 location=None, node_locations=None)
    unknown_location[4]["location"] = {"references": ["var.location"]}
    found = resources_of(plan_of(
        node_pool("regional", {}, computed, location="us-central1", node_locations=None),
        node_pool("two_zones", {}, location="us-central1",
                  node_locations=["us-central1-a", "us-central1-f"]),
        node_pool("zonal", {}, computed, location="us-central1-a", node_locations=None),
        cluster, via_cluster, unknown_location,
        node_pool("three", {}, location="us-east1", node_locations=cluster_zones),
    ))
    counts = {address.split(".")[1]: (r.count, "count" in r.unknown)
              for address, r in found.items() if r.kind == "google_container_node_pool"}
    assert counts == {
        "regional": (6, False),  # 2 per zone × GKE's three default zones
        "two_zones": (4, False),
        "zonal": (2, False),
        "via_cluster": (4, False),  # the zonal cluster's own zone + the one it adds
        "unknown_location": (2, True),  # regional or zonal: not known yet
        "three": (6, False),
    }


# ---------------------------------------------------------------------------- Azure


def test_azure_capacity_reservation_groups_are_reserved() -> None:
    group = ("/subscriptions/0000/resourceGroups/ml/providers/Microsoft.Compute/"
             "capacityReservationGroups/a100")
    vm = {"name": "vm", "size": "Standard_NC24ads_A100_v4", "location": "eastus",
          "priority": "Regular", "tags": TAGS, "capacity_reservation_group_id": group,
          "os_disk": [{"disk_encryption_set_id": None}]}
    vmss = {**vm, "name": "vmss", "sku": "Standard_NC24ads_A100_v4", "instances": 2}
    vmss.pop("size")
    pool = {"name": "gpu", "vm_size": "Standard_NC24ads_A100_v4", "node_count": 3,
            "priority": "Regular", "tags": TAGS, "capacity_reservation_group_id": group,
            "kubernetes_cluster_id": "/subscriptions/0000/aks/train"}
    plain = {**pool, "name": "plain", "capacity_reservation_group_id": None}
    found = resources_of(plan_of(
        ("azurerm_linux_virtual_machine.vm", "azurerm", vm, {"id": True}, {}),
        ("azurerm_linux_virtual_machine_scale_set.vmss", "azurerm", vmss, {"id": True}, {}),
        ("azurerm_kubernetes_cluster_node_pool.gpu", "azurerm", pool, {"id": True}, {}),
        ("azurerm_kubernetes_cluster_node_pool.plain", "azurerm", plain, {"id": True}, {}),
    ))
    assert found["azurerm_linux_virtual_machine.vm"].capacity == Capacity.RESERVED
    assert found["azurerm_linux_virtual_machine_scale_set.vmss"].capacity == Capacity.RESERVED
    assert found["azurerm_kubernetes_cluster_node_pool.gpu"].capacity == Capacity.RESERVED
    assert found["azurerm_kubernetes_cluster_node_pool.plain"].capacity == Capacity.ON_DEMAND


def test_aks_gpu_pool_cost_tags_come_from_tags_not_computed_node_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = {"name": "gpu", "vm_size": "Standard_NC6s_v3", "node_count": 1, "priority": "Regular",
            "tags": TAGS, "node_labels": None,
            "kubernetes_cluster_id": "/subscriptions/0000/aks/train"}
    plan = plan_of(("azurerm_kubernetes_cluster_node_pool.gpu", "azurerm", pool,
                    {"id": True, "node_labels": True},
                    {"vm_size": const("Standard_NC6s_v3"), "tags": const(TAGS)}))
    resource = resources_of(plan)["azurerm_kubernetes_cluster_node_pool.gpu"]
    assert not any(path.startswith("tags") for path in resource.unknown)
    assert resource.tags["team"] == "research" and resource.capacity == Capacity.ON_DEMAND
    _, report = check_plan(plan, tmp_path, capsys, monkeypatch)
    assert "azurerm_kubernetes_cluster_node_pool.gpu" not in verdicts(report, "required-cost-tags")
    assert verdicts(report, "gpu-spot-required") == {
        "azurerm_kubernetes_cluster_node_pool.gpu": "fail"}


# ---------------------------------------------------------------------------- live AWS


def test_live_aws_reservations_and_capacity_blocks_are_reserved() -> None:
    def instance(instance_id: str, **extra: Any) -> dict[str, Any]:
        return {"InstanceId": instance_id, "InstanceType": "p5.48xlarge",
                "State": {"Name": "running"}, "Tags": [{"Key": "team", "Value": "r"}], **extra}

    template_data = {"InstanceType": "p5e.48xlarge",
                     "InstanceMarketOptions": {"MarketType": "capacity-block"}}
    scan = {
        "account": "123456789012", "region": "us-east-1",
        "instances": [
            instance("i-odcr", CapacityReservationId="cr-0123456789abcdef0"),
            instance("i-block", InstanceLifecycle="capacity-block",
                     CapacityReservationId="cr-0fedcba9876543210"),
            instance("i-open", CapacityReservationSpecification={
                "CapacityReservationPreference": "open"}),
            instance("i-spot", InstanceLifecycle="spot"),
        ],
        "launch_templates": [{"LaunchTemplateId": "lt-block", "LaunchTemplateName": "block",
                              "Versions": [{"VersionNumber": 1, "DefaultVersion": True,
                                            "LaunchTemplateData": template_data}]}],
        "node_groups": [{"nodegroupName": "block", "nodegroupArn": "arn:ng/block",
                         "clusterName": "train", "capacityType": "CAPACITY_BLOCK",
                         "instanceTypes": ["p5e.48xlarge"],
                         "scalingConfig": {"desiredSize": 2}}],
    }
    found = {r.id: r for r in region_resources(scan, builtin_catalog())}
    assert found["i-odcr"].capacity == Capacity.RESERVED
    assert found["i-block"].capacity == Capacity.RESERVED
    assert found["i-open"].capacity == Capacity.ON_DEMAND
    assert found["i-spot"].capacity == Capacity.SPOT
    assert found["lt-block"].capacity == Capacity.RESERVED
    assert (found["arn:ng/block"].capacity, found["arn:ng/block"].count) == (
        Capacity.RESERVED, 2)


def test_source_location_json_has_no_definition_key_unless_there_is_one() -> None:
    plain = SourceLocation(file="main.tf", line=3)
    assert plain.model_dump(mode="json") == {"file": "main.tf", "line": 3}
    module_block = SourceLocation(file="m/x.tf", line=1)
    nested = SourceLocation(file="main.tf", line=9, definition=module_block)
    assert nested.model_dump(mode="json")["definition"] == {"file": "m/x.tf", "line": 1}


def test_sarif_with_a_related_location_is_valid(
    real_plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schemas = sorted((node_tools() / SCHEMA_PACKAGE).glob("lib/schemas/sarif-2.1.0*.json"))
    multitool = node_tools() / MULTITOOL
    if not schemas or not multitool.is_file():
        pytest.skip(f"SARIF schema or Multitool not found: {INSTALL_HINT}")
    sarif_schema = json.loads(schemas[-1].read_text(encoding="utf-8"))
    monkeypatch.chdir(DATA.parent)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(real_plan))
    _, out, _ = run_cli(["check-plan", str(path), "--tf-dir", "terraform-capacity", "-f", "sarif"],
                        capsys, monkeypatch)
    log = json.loads(out)
    assert any("relatedLocations" in r for r in log["runs"][0]["results"])
    assert schema_errors(sarif_schema, log) == []
    log_file = tmp_path / "gpuwarden.sarif"
    log_file.write_text(out)
    _, problems = run_multitool(multitool, log_file, tmp_path)
    assert [p for p in problems if p.get("level") == "error"] == []


@pytest.mark.parametrize("odd", ["x", 7, [1, "y"], {"capacity_reservation_target": "z"},
                                 [{"capacity_reservation_target": [None, 3]}], None])
def test_odd_shapes_read_as_no_reservation_without_error(odd: Any) -> None:
    plan = plan_of(
        aws_instance("aws_instance.odd", {"capacity_reservation_specification": odd,
                                          "instance_market_options": odd}, {}, {}),
        gce("odd", reservation_affinity=odd, scheduling=odd),
        node_pool("odd", {"reservation_affinity": odd, "flex_start": odd},
                  node_locations=odd, queued_provisioning=odd, location=odd),
        ("azurerm_kubernetes_cluster_node_pool.odd", "azurerm",
         {"vm_size": "Standard_NC6s_v3", "capacity_reservation_group_id": odd,
          "node_labels": odd, "tags": TAGS}, {}, {}),
    )
    found = resources_of(plan)
    assert len([r for r in found.values() if r.category.value != "volume"]) == 4
    assert all(r.capacity != Capacity.RESERVED for r in found.values()
               if r.id != "azurerm_kubernetes_cluster_node_pool.odd" or not isinstance(odd, str))


def test_capacity_block_groups_count_the_block_instances_not_desired_zero() -> None:
    def node_group(name: str, capacity_type: str) -> tuple[str, str, dict[str, Any],
                                                            dict[str, Any], dict[str, Any]]:
        after = {"cluster_name": "train", "node_group_name": name, "capacity_type": capacity_type,
                 "instance_types": ["p5.48xlarge"], "tags": TAGS, "tags_all": TAGS,
                 "scaling_config": [{"desired_size": 0, "min_size": 0, "max_size": 4}]}
        return (f"aws_eks_node_group.{name}", "aws", after, {"id": True},
                {"capacity_type": const(capacity_type)})

    template = ("aws_launch_template.block", "aws", {
        "name": "block", "instance_type": "p5.48xlarge", "tags": TAGS, "tags_all": TAGS,
        "instance_market_options": [{"market_type": "capacity-block", "spot_options": []}]},
        {"id": True}, {})
    group = ("aws_autoscaling_group.block", "aws", {
        "name": "block", "desired_capacity": 0, "min_size": 0, "max_size": 3,
        "launch_template": [{"id": None, "name": "block", "version": "$Latest"}]},
        {"launch_template": [{"id": True}]},
        {"launch_template": [{"id": {"references": ["aws_launch_template.block.id",
                                                    "aws_launch_template.block"]}}]})
    found = resources_of(plan_of(node_group("block", "CAPACITY_BLOCK"),
                                 node_group("on_demand", "ON_DEMAND"), template, group))
    assert (found["aws_eks_node_group.block"].count,
            found["aws_eks_node_group.block"].capacity) == (4, Capacity.RESERVED)
    assert found["aws_eks_node_group.on_demand"].count == 0
    asg = found["aws_autoscaling_group.block"]
    assert (asg.count, asg.capacity, asg.instance_type) == (3, Capacity.RESERVED, "p5.48xlarge")
