"""`scan --billing FILE` on a live AWS scan (moto server on loopback): a cost export lists the
instances an autoscaling group or EKS node group runs, never the group; the group is priced at
the sum of its member instances' billed rates, and its spend is counted once in the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import HOURS_PER_MONTH
from tests.conftest_aws import (
    ACCOUNT,
    COST_TAGS,
    EAST,
    IMAGE,
    AwsLab,
    aws_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    tag_list,
)
from tests.test_cli import run_cli

EVENING = "2026-12-01T22:00:00Z"  # a Tuesday, off-hours: groups of dev GPUs fail
HEADER = ("ProviderName,ServiceName,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ResourceId,"
          "ResourceName,BilledCost,EffectiveCost,BillingCurrency")
DAY = "2026-11-01T00:00:00Z,2026-11-02T00:00:00Z"  # a 24-hour window


def _asg(lab: AwsLab, name: str, desired: int, tags: dict[str, str]) -> tuple[str, list[str]]:
    """An autoscaling group of g5.xlarge (moto launches its instances): (ARN, instance ids)."""
    autoscaling = lab.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=0, MaxSize=4, DesiredCapacity=desired,
        LaunchTemplate={"LaunchTemplateName": "gpu-workers", "Version": "$Latest"},
        AvailabilityZones=[f"{EAST}a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags.items()])
    group = autoscaling.describe_auto_scaling_groups(
        AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return group["AutoScalingGroupARN"], [i["InstanceId"] for i in group["Instances"]]


def seed(lab: AwsLab) -> dict[str, Any]:
    """A standalone autoscaling group and an EKS node group (on the autoscaling group EKS made
    for it), each running two g5.xlarge."""
    lab.client("ec2").create_launch_template(
        LaunchTemplateName="gpu-workers",
        LaunchTemplateData={"InstanceType": "g5.xlarge", "ImageId": IMAGE,
                            "TagSpecifications": [{"ResourceType": "instance",
                                                   "Tags": tag_list(COST_TAGS)}]})
    asg, asg_members = _asg(lab, "gpu-workers", 2, {"env": "dev"})
    eks = lab.client("eks")
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    eks.create_cluster(name="ml", roleArn=role, resourcesVpcConfig={"subnetIds": []})
    group = eks.create_nodegroup(
        clusterName="ml", nodegroupName="gpu", nodeRole=role, subnets=["subnet-1"],
        instanceTypes=["g5.xlarge"], capacityType="ON_DEMAND",
        scalingConfig={"minSize": 1, "maxSize": 3, "desiredSize": 2}, tags={"team": "ml"},
    )["nodegroup"]
    eks_asg = group["resources"]["autoScalingGroups"][0]["name"]
    _, node_members = _asg(lab, eks_asg, 2, {"eks:nodegroup-name": "gpu", "env": "dev"})
    assert len(asg_members) == len(node_members) == 2
    return {"asg": asg, "asg_members": asg_members, "nodegroup": group["nodegroupArn"],
            "node_members": node_members}


def export(path: Path, costs: dict[str, float]) -> Path:
    """A FOCUS export of one day: each instance's EffectiveCost (an ARN for every other one,
    as AWS writes them), a tax row that must not count, and an instance not scanned."""
    rows = [HEADER]
    for number, (instance, cost) in enumerate(costs.items()):
        resource_id = (f"arn:aws:ec2:{EAST}:{ACCOUNT}:instance/{instance}" if number % 2
                       else instance)
        rows.append(f"AWS,Amazon Elastic Compute Cloud,Usage,{DAY},{resource_id},{instance},"
                    f"{cost * 1.4:.2f},{cost:.2f},USD")
        rows.append(f"AWS,Amazon Elastic Compute Cloud,Tax,{DAY},{resource_id},{instance},"
                    "99.00,99.00,USD")
    rows.append(f"AWS,Amazon Elastic Compute Cloud,Usage,{DAY},i-0notscanned000000,x,"
                "500.00,500.00,USD")
    path.write_text("\n".join(rows) + "\n")
    return path


def scan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
         *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(["scan", "--source", "aws", "--region", EAST, "--now", EVENING,
                              "-f", "json", *extra], capsys, monkeypatch)
    assert code in (0, 1), err
    return dict(json.loads(out))


def spend_of(report: dict[str, Any], resource_id: str) -> tuple[float, set[str]]:
    """The resource's monthly spend and the cost bases of its failing savings findings."""
    found = [f for f in report["findings"] if f["resource"]["id"] == resource_id
             and "resource_monthly_spend_usd" in f["details"]]
    assert found, f"no priced finding for {resource_id}"
    spends = {f["details"]["resource_monthly_spend_usd"] for f in found}
    assert len(spends) == 1  # one price everywhere
    return spends.pop(), {f["cost_basis"] for f in found}


def test_groups_are_priced_at_the_sum_of_their_members_billed_rates(
    aws: AwsLab, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estate = seed(aws)
    asg_costs = dict(zip(estate["asg_members"], (24.0, 12.0), strict=True))  # $1.00 + $0.50/h
    node_costs = {estate["node_members"][0]: 48.0}  # $2.00/h; the other member not billed
    billing = export(tmp_path / "focus.csv", {**asg_costs, **node_costs})

    listed = scan(capsys, monkeypatch)
    billed = scan(capsys, monkeypatch, "--billing", str(billing))

    asg_spend, asg_bases = spend_of(billed, estate["asg"])
    assert asg_spend == pytest.approx(1.5 * HOURS_PER_MONTH, abs=0.01)
    assert all(basis.startswith("billed $1.50/h (sum of 2 member instances in focus.csv, "
                                "EffectiveCost 2026-11-01 to 2026-11-02) × 730 h")
               for basis in asg_bases)
    node_spend, node_bases = spend_of(billed, estate["nodegroup"])
    assert node_spend == pytest.approx(2.0 * HOURS_PER_MONTH, abs=0.01)
    assert all(basis.startswith("billed $2.00/h (sum of 1 of 2 member instances in focus.csv")
               for basis in node_bases)

    # list prices without the export: two g5.xlarge each
    asg_list, list_bases = spend_of(listed, estate["asg"])
    assert not any(basis.startswith("billed") for basis in list_bases)
    node_list, _ = spend_of(listed, estate["nodegroup"])

    # the members are no scanned resources of their own: each group's spend is counted once
    scanned = {f["resource"]["id"] for report in (listed, billed) for f in report["findings"]}
    assert not scanned & {*estate["asg_members"], *estate["node_members"]}
    assert billed["summary"]["monthly_spend_usd"] == pytest.approx(
        listed["summary"]["monthly_spend_usd"] - asg_list - node_list + asg_spend + node_spend,
        abs=0.02)
    assert billed["summary"]["resources"] == listed["summary"]["resources"]


def test_a_group_none_of_whose_members_is_billed_keeps_its_list_price(
    aws: AwsLab, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estate = seed(aws)
    billing = export(tmp_path / "focus.csv", {"i-0someoneelse00000": 24.0})
    listed = scan(capsys, monkeypatch)
    billed = scan(capsys, monkeypatch, "--billing", str(billing))
    for group in ("asg", "nodegroup"):
        assert spend_of(billed, estate[group]) == spend_of(listed, estate[group])
    assert billed["summary"]["monthly_spend_usd"] == listed["summary"]["monthly_spend_usd"]
