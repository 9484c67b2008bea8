"""`--source aws` through real boto3 against moto in server mode on loopback: what is read and
how it is normalized, the findings per policy, dry-run calling only read APIs, partial failures
(denied region, throttling, a region that does not exist, expired credentials), several
accounts through assumed roles, and the `--save-snapshot` round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, Category, Resource, State
from engine.sources.aws import clients as aws_clients
from engine.sources.aws import collect, customer_key, read_snapshot_section, region_resources
from engine.sources.aws import compute as aws_compute
from engine.sources.registry import Collected, ScanOptions
from engine.sources.snapshot import SnapshotContext
from tests.conftest import REPO
from tests.conftest_aws import (
    ACCOUNT,
    COST_TAGS,
    EAST,
    OTHER_ACCOUNT,
    ROLE,
    WEST,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    is_read_only,
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)
from tests.test_cli import run_cli

OFF_HOURS_NOW = "2026-12-01T03:00:00Z"  # a Tuesday, 03:00 UTC


def scan_args(*extra: str) -> list[str]:
    return ["scan", "--source", "aws", "--region", EAST, "--region", WEST,
            "--now", OFF_HOURS_NOW, "-f", "json", *extra]


def failing(report: dict[str, Any], policy: str) -> set[str]:
    return {f["resource"]["id"] for f in report["findings"]
            if f["policy"] == policy and f["result"] == "fail"}


def collect_aws(*regions: str, **options: Any) -> Collected:
    return collect(None, ScanOptions(regions=regions or (EAST, WEST), **options),
                   builtin_catalog())


def by_id(collected: Collected) -> dict[str, Resource]:
    return {r.id: r for r in collected.resources}


def deny(code: str, *, region: str | None = None, service: str | None = None,
         operation: str | None = None) -> Any:
    """A client hook making matching calls fail as AWS would (before anything is sent)."""
    from botocore.exceptions import ClientError

    def hook(client: Any) -> None:
        if region is not None and client.meta.region_name != region:
            return
        if service is not None and client.meta.service_model.service_name != service:
            return

        def before_call(model: Any, **_: Any) -> None:
            if operation is None or model.name == operation:
                raise ClientError({"Error": {"Code": code, "Message": f"simulated {code}"}},
                                  model.name)

        client.meta.events.register("before-call", before_call)

    return hook


# ---------------------------------------------------------------------------- normalizing


def test_scan_reads_and_normalizes_the_estate(aws: AwsLab, estate: Estate) -> None:
    found = by_id(collect_aws())
    dev = found[estate["dev"]]
    assert (dev.kind, dev.category, dev.name) == ("aws_instance", Category.INSTANCE,
                                                  "trainer-dev")
    assert (dev.region, dev.account, dev.state) == (EAST, ACCOUNT, State.RUNNING)
    assert dev.capacity is Capacity.ON_DEMAND and dev.instance_type == "p3.2xlarge"
    assert dev.gpu is not None and dev.gpu.model == "NVIDIA V100" and dev.gpu.count == 1
    assert dev.hourly_usd == pytest.approx(3.06)
    assert found[estate["spot"]].capacity is Capacity.SPOT
    assert found[estate["prod"]].gpu is not None and found[estate["prod"]].gpu.count == 8
    assert found[estate["stopped"]].state is State.STOPPED
    assert found[estate["cpu"]].gpu is None
    assert found[estate["west"]].region == WEST
    # an autoscaling group stands for the instances it launched
    assert estate["asg-member"] not in found

    data, scratch = found[estate["dev-data"]], found[estate["scratch"]]
    assert data.category is Category.VOLUME and data.owner == estate["dev"]
    assert (data.encrypted, data.customer_key) == (True, True)
    assert data.tags["team"] == "ml" and data.tags["env"] == "dev"  # from its instance
    assert "Name" not in data.tags
    assert (found[estate["dev-root"]].encrypted, found[estate["dev-root"]].customer_key) \
        == (True, False)  # the default aws/ebs key is AWS managed
    assert (scratch.encrypted, scratch.state) == (False, State.STOPPED)

    template = found[estate["template"]]
    assert (template.kind, template.instance_type, template.capacity) == \
        ("aws_launch_template", "g5.xlarge", Capacity.ON_DEMAND)
    assert template.tags == COST_TAGS  # from its instance tag specification

    group = found[estate["asg"]]
    assert (group.kind, group.name, group.count, group.state) == \
        ("aws_autoscaling_group", "gpu-workers", 2, State.RUNNING)
    assert group.instance_type == "g5.xlarge" and group.capacity is Capacity.ON_DEMAND
    assert group.tags == {**COST_TAGS, "env": "dev"}

    nodes = found[estate["nodegroup"]]
    assert (nodes.kind, nodes.cluster, nodes.count, nodes.instance_type) == \
        ("aws_eks_node_group", "ml", 2, "g5.xlarge")
    assert nodes.capacity is Capacity.ON_DEMAND and nodes.tags == {"team": "ml"}

    job = found[estate["training"]]
    assert (job.capacity, job.count, job.instance_type, job.state) == \
        (Capacity.SPOT, 2, "ml.p3.2xlarge", State.RUNNING)
    assert job.hourly_usd == pytest.approx(3.06)  # priced as the EC2 type it runs on
    notebook = found[estate["notebook"]]
    assert (notebook.category, notebook.state, notebook.tags) == \
        (Category.NOTEBOOK, State.RUNNING, COST_TAGS)
    endpoint = found[estate["endpoint"]]
    assert (endpoint.name, endpoint.count, endpoint.instance_type) == \
        ("ranker/main", 3, "ml.g4dn.xlarge")
    assert endpoint.tags["env"] == "prod"


def test_scan_paginates(aws: AwsLab, monkeypatch: pytest.MonkeyPatch) -> None:
    ec2 = aws.client("ec2")
    ids = {run_instance(ec2, "g5.xlarge", {"n": str(n)}) for n in range(7)}
    calls = aws.record_calls()
    original = aws_compute.pages

    def small_pages(client: Any, operation: str, key: str, **params: Any) -> Any:
        if operation == "describe_instances":
            params["MaxResults"] = 5  # EC2's smallest page
        return original(client, operation, key, **params)

    monkeypatch.setattr(aws_compute, "pages", small_pages)
    found = {r.id for r in collect_aws(EAST).resources if r.kind == "aws_instance"}
    assert found == ids
    pages = [c for c in calls if c[2] == "DescribeInstances"]
    assert len(pages) == 2 and "NextToken" in pages[1][3]


# ---------------------------------------------------------------------------- findings


def test_scan_reports_findings_per_policy(aws: AwsLab, estate: Estate,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_cli(scan_args(), capsys, monkeypatch)
    report = json.loads(out)
    assert code == 1 and report["mode"] == "dry-run", err
    assert failing(report, "gpu-off-hours-shutdown") == {
        estate[n] for n in ("dev", "spot", "west", "asg", "nodegroup", "notebook")}
    assert failing(report, "gpu-spot-required") == {
        estate[n] for n in ("dev", "exempt", "stopped", "west", "template", "asg", "nodegroup")}
    assert failing(report, "required-cost-tags") == {
        estate[n] for n in ("spot", "nodegroup", "training")}
    unencrypted = failing(report, "encryption-at-rest")
    assert {estate["spot-root"], estate["cpu-root"], estate["scratch"]} <= unencrypted
    assert not unencrypted & {estate["dev-root"], estate["dev-data"]}
    off_hours = {f["resource"]["id"]: f for f in report["findings"]
                 if f["policy"] == "gpu-off-hours-shutdown"}
    assert off_hours[estate["dev"]]["remediation"]["status"] == "planned"
    assert off_hours[estate["dev"]]["remediation"]["detail"] == f"would stop {estate['dev']}"
    assert off_hours[estate["asg"]]["remediation"]["detail"].startswith("would scale")


def test_dry_run_calls_only_read_apis_and_changes_nothing(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def read_only(client: Any) -> None:
        def before_call(model: Any, **_: Any) -> None:
            seen.append(model.name)
            if not is_read_only(model.name):
                raise AssertionError(f"dry-run called mutating API {model.name}")

        client.meta.events.register("before-call", before_call)

    aws.hooks.append(read_only)
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(scan_args(), capsys, monkeypatch)
    assert code == 1 and failing(json.loads(out), "gpu-off-hours-shutdown")
    assert {"DescribeInstances", "DescribeAutoScalingGroups", "DescribeNodegroup",
            "ListTags"} <= set(seen)
    assert all(is_read_only(name) for name in seen)
    state = aws.client("ec2").describe_instances(InstanceIds=[estate["dev"]])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"
    assert not list(tmp_path.iterdir())  # no audit log either


# ---------------------------------------------------------------------------- partial failures


def test_access_denied_in_one_region_is_a_warning(aws: AwsLab, estate: Estate,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    aws.hooks.append(deny("UnauthorizedOperation", region=WEST))
    code, out, err = run_cli(scan_args(), capsys, monkeypatch)
    report = json.loads(out)
    assert code == 1
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert f"account {ACCOUNT}, region {WEST}: nothing could be read" in warnings[0]
    assert "access denied" in warnings[0] and "UnauthorizedOperation" in warnings[0]
    assert estate["west"] not in failing(report, "gpu-off-hours-shutdown")
    assert estate["dev"] in failing(report, "gpu-off-hours-shutdown")


def test_one_denied_service_leaves_the_others(aws: AwsLab, estate: Estate) -> None:
    aws.hooks.append(deny("AccessDeniedException", region=EAST, service="sagemaker"))
    collected = collect_aws()
    assert collected.warnings == [
        f"aws: account {ACCOUNT}, region {EAST}, sagemaker: access denied to "
        "ListTrainingJobs (AccessDeniedException: simulated AccessDeniedException); skipped",
        f"aws: account {ACCOUNT}, region {EAST}, sagemaker: access denied to "
        "ListNotebookInstances (AccessDeniedException: simulated AccessDeniedException); "
        "skipped",
        f"aws: account {ACCOUNT}, region {EAST}, sagemaker: access denied to "
        "ListEndpoints (AccessDeniedException: simulated AccessDeniedException); skipped",
    ]
    kinds = {r.kind for r in collected.resources}
    assert "aws_sagemaker_notebook_instance" not in kinds
    assert {"aws_instance", "aws_autoscaling_group", "aws_eks_node_group"} <= kinds
    assert "notebook_instances" not in collected.snapshot["aws"][0]


def test_denied_kms_aliases_make_customer_keys_unknown(aws: AwsLab, estate: Estate) -> None:
    aws.hooks.append(deny("AccessDeniedException", service="kms"))
    found = by_id(collect_aws(EAST))
    assert found[estate["dev-data"]].customer_key is None
    assert "customer_key" in found[estate["dev-data"]].unknown
    assert found[estate["scratch"]].customer_key is False  # not encrypted: no key to tell


def test_expired_credentials_are_one_clear_error(aws: AwsLab, estate: Estate,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    aws.hooks.append(deny("ExpiredToken"))
    code, out, err = run_cli(scan_args(), capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "gpuwarden: error: aws: the credentials were rejected" in err
    assert "ExpiredToken" in err and "Traceback" not in err


def test_a_region_that_does_not_exist_is_a_warning(aws: AwsLab, estate: Estate) -> None:
    collected = collect_aws(EAST, "xx-fake-1")
    assert collected.warnings == [
        f"aws: account {ACCOUNT}: region 'xx-fake-1' does not exist; skipped"]
    assert estate["dev"] in by_id(collected)


def test_only_bad_regions_is_an_error(aws: AwsLab) -> None:
    with pytest.raises(InputError, match=r"nothing could be read: .*'xx-fake-1' does not exist"):
        collect_aws("xx-fake-1")


def test_throttling_is_retried_then_reported(aws: AwsLab, estate: Estate,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.awsrequest import AWSResponse
    from botocore.retries.adaptive import ClientRateLimiter
    from botocore.retries.standard import ExponentialBackoff

    # keep the retries, not their waiting: no backoff delay, no client-side rate limiting
    monkeypatch.setattr(aws_clients, "RETRY_ATTEMPTS", 3)
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    monkeypatch.setattr(ClientRateLimiter, "on_sending_request", lambda self, **_: None)
    attempts: list[str] = []

    class Raw:
        def stream(self, **_: Any) -> Any:
            yield self.body

        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()

    def throttle(client: Any) -> None:
        if client.meta.service_model.service_name != "sagemaker":
            return

        def before_send(request: Any, **_: Any) -> Any:
            if request.headers.get("X-Amz-Target", b"").endswith(b"ListNotebookInstances"):
                attempts.append(request.url)
                return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.1"},
                                   Raw())
            return None

        client.meta.events.register("before-send", before_send)

    aws.hooks.append(throttle)
    collected = collect_aws(EAST)
    assert len(attempts) == 1 + 3  # the adaptive retry mode retried 3 times, then gave up
    assert collected.warnings == [
        f"aws: account {ACCOUNT}, region {EAST}, sagemaker: ListNotebookInstances still "
        "throttled after 3 retries (ThrottlingException); skipped"]
    found = by_id(collected)
    assert estate["notebook"] not in found and estate["endpoint"] in found


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role-arn", "audit"], "is not an IAM role ARN"),
        (["--profile", "nobody"], "aws: The config profile (nobody) could not be found"),
        (["--source", "aws:extra"], "--source aws takes no argument"),
    ],
)
def test_usage_errors(aws: AwsLab, args: list[str], message: str,
                      capsys: pytest.CaptureFixture[str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(scan_args(*args), capsys, monkeypatch)
    assert code == 2 and message in err and "Traceback" not in err


def test_no_region_anywhere_is_an_error(aws: AwsLab, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    code, _, err = run_cli(["scan", "--source", "aws"], capsys, monkeypatch)
    assert code == 2 and "aws: no region: give --region" in err


def test_default_region_is_the_sessions(aws: AwsLab, estate: Estate) -> None:
    collected = collect(None, ScanOptions(), builtin_catalog())
    assert {r.region for r in collected.resources} == {EAST}


def test_all_regions_are_the_enabled_ones(aws: AwsLab, estate: Estate) -> None:
    calls = aws.record_calls()
    collected = collect_aws("all", max_workers=16)
    listed = aws.client("ec2").describe_regions(AllRegions=True)["Regions"]
    disabled = {r["RegionName"] for r in listed if r["OptInStatus"] == "not-opted-in"}
    scanned = {call[0] for call in calls if call[2] == "DescribeInstances"}
    assert disabled and scanned == {r["RegionName"] for r in listed} - disabled
    assert {estate["dev"], estate["west"]} <= set(by_id(collected))


# ---------------------------------------------------------------------------- accounts


def test_each_role_is_assumed_and_its_account_scanned(aws: AwsLab, estate: Estate) -> None:
    other = aws.session_for(OTHER_ACCOUNT)
    elsewhere = run_instance(aws.client("ec2", EAST, other), "p3.2xlarge", {})
    calls = aws.record_calls()
    collected = collect_aws(EAST, role_arns=(ROLE.format(account=ACCOUNT),
                                             ROLE.format(account=OTHER_ACCOUNT)))
    found = by_id(collected)
    assert found[elsewhere].account == OTHER_ACCOUNT
    assert found[estate["dev"]].account == ACCOUNT
    assumed = [c[3] for c in calls if c[2] == "AssumeRole"]
    assert [a["RoleSessionName"] for a in assumed] == ["gpuwarden", "gpuwarden"]
    clients = collected.clients["aws"]
    assert {a.account_id for a in clients.accounts} == {ACCOUNT, OTHER_ACCOUNT}


def test_a_role_that_cannot_be_assumed_is_skipped(aws: AwsLab, estate: Estate) -> None:
    aws.hooks.append(deny("AccessDenied", service="sts"))
    with pytest.raises(InputError, match=r"cannot assume .* access denied"):
        collect_aws(EAST, role_arns=(ROLE.format(account=OTHER_ACCOUNT),))


# ---------------------------------------------------------------------------- snapshots


def test_save_snapshot_then_replay_gives_the_same_findings(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = tmp_path / "estate.json"
    code, live, _ = run_cli(scan_args("--save-snapshot", str(saved)), capsys, monkeypatch)
    assert code == 1
    bundle = json.loads(saved.read_text())
    assert [(s["account"], s["region"]) for s in bundle["aws"]] == [(ACCOUNT, EAST),
                                                                     (ACCOUNT, WEST)]
    code, replayed, _ = run_cli(["scan", "--source", f"snapshot:{saved}", "--now", OFF_HOURS_NOW,
                                 "-f", "json"], capsys, monkeypatch)
    assert code == 1
    assert json.loads(replayed)["findings"] == json.loads(live)["findings"]
    assert json.loads(replayed)["summary"] == json.loads(live)["summary"]


def test_malformed_snapshot_sections_are_input_errors() -> None:
    ctx = SnapshotContext("bundle.json", builtin_catalog())
    with pytest.raises(InputError, match="aws must be a list"):
        read_snapshot_section({"region": EAST}, ctx)
    with pytest.raises(InputError, match=r"aws\[0\] needs a 'region'"):
        read_snapshot_section([{"instances": []}], ctx)
    with pytest.raises(InputError, match=r"bundle.json: aws\[0\] \(us-east-1\): unreadable"):
        read_snapshot_section([{"region": EAST, "instances": [{"State": {}}]}], ctx)


# ---------------------------------------------------------------------------- pure normalizing


def normalize(**sections: Any) -> dict[str, Resource]:
    scan = {"account": ACCOUNT, "region": EAST, **sections}
    return {r.id: r for r in region_resources(scan, builtin_catalog())}


def template(template_id: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"LaunchTemplateId": template_id, "LaunchTemplateName": template_id, **extra,
            "Versions": [{"VersionNumber": 1, "DefaultVersion": True,
                          "LaunchTemplateData": data}]}


def group(name: str, **fields: Any) -> dict[str, Any]:
    return {"AutoScalingGroupName": name, "AutoScalingGroupARN": f"arn:asg/{name}",
            "DesiredCapacity": 3, "MinSize": 0, "MaxSize": 5, **fields}


def test_autoscaling_capacity_follows_the_mixed_instances_distribution() -> None:
    spec = {"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-1", "Version": "$Latest"}}
    found = normalize(
        launch_templates=[template("lt-1", {"InstanceType": "g5.xlarge"})],
        autoscaling_groups=[
            group("all-spot", MixedInstancesPolicy={
                "LaunchTemplate": {**spec, "Overrides": [{"InstanceType": "p3.2xlarge"}]},
                "InstancesDistribution": {"OnDemandBaseCapacity": 0,
                                          "OnDemandPercentageAboveBaseCapacity": 0}}),
            group("half", MixedInstancesPolicy={
                "LaunchTemplate": spec,
                "InstancesDistribution": {"OnDemandPercentageAboveBaseCapacity": 50}}),
            group("attribute-based", MixedInstancesPolicy={"LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-gone"},
                "Overrides": [{"InstanceRequirements": {"VCpuCount": {"Min": 4}}}]}}),
            group("legacy", LaunchConfigurationName="old"),
        ],
        launch_configurations=[{"LaunchConfigurationName": "old", "InstanceType": "g4dn.xlarge",
                                "SpotPrice": "0.30"}],
    )
    spot = found["arn:asg/all-spot"]
    assert (spot.capacity, spot.instance_type) == (Capacity.SPOT, "p3.2xlarge")
    half = found["arn:asg/half"]
    assert (half.capacity, half.instance_type) == (Capacity.ON_DEMAND, "g5.xlarge")
    assert "instance_type" in found["arn:asg/attribute-based"].unknown
    legacy = found["arn:asg/legacy"]
    assert (legacy.capacity, legacy.instance_type) == (Capacity.SPOT, "g4dn.xlarge")


def test_autoscaling_tags_are_the_propagated_ones_and_markers() -> None:
    tags = [{"Key": "team", "Value": "a", "PropagateAtLaunch": True},
            {"Key": "owner", "Value": "x", "PropagateAtLaunch": False},
            {"Key": "Env", "Value": "prod", "PropagateAtLaunch": False},
            {"Key": "gpuwarden-offhours", "Value": "off=(M-F,20)", "PropagateAtLaunch": False}]
    found = normalize(autoscaling_groups=[group("g", Tags=tags)])
    assert found["arn:asg/g"].tags == {"team": "a", "Env": "prod",
                                       "gpuwarden-offhours": "off=(M-F,20)"}


def test_groups_eks_manages_and_their_instances_are_left_to_the_node_group() -> None:
    found = normalize(
        instances=[{"InstanceId": "i-node", "InstanceType": "g5.xlarge",
                    "State": {"Name": "running"},
                    "Tags": [{"Key": "aws:autoscaling:groupName", "Value": "eks-gpu"}]}],
        autoscaling_groups=[group("eks-gpu", Tags=[{"Key": "eks:nodegroup-name",
                                                    "Value": "gpu"}])],
        node_groups=[{"nodegroupName": "gpu", "nodegroupArn": "arn:ng/gpu",
                      "clusterName": "ml", "capacityType": "SPOT",
                      "scalingConfig": {"desiredSize": 0}, "launchTemplate": {"id": "lt-9"},
                      "resources": {"autoScalingGroups": [{"name": "eks-gpu"}]}}],
        launch_templates=[template("lt-9", {"InstanceType": "p4d.24xlarge"})],
    )
    assert set(found) == {"arn:ng/gpu", "lt-9"}
    node_group = found["arn:ng/gpu"]
    assert (node_group.capacity, node_group.instance_type, node_group.state) == \
        (Capacity.SPOT, "p4d.24xlarge", State.STOPPED)


def test_instances_are_kept_when_their_group_could_not_be_read() -> None:
    member = {"InstanceId": "i-1", "InstanceType": "g5.xlarge", "State": {"Name": "running"},
              "Tags": [{"Key": "aws:autoscaling:groupName", "Value": "g"}]}
    assert "i-1" in normalize(instances=[member])
    assert "i-1" not in normalize(instances=[member], autoscaling_groups=[])


def test_customer_keys() -> None:
    managed = frozenset({"1111"})
    assert customer_key(None, managed) is False
    assert customer_key("arn:aws:kms:us-east-1:1:key/1111", managed) is False
    assert customer_key("arn:aws:kms:us-east-1:1:alias/aws/ebs", None) is False
    assert customer_key("arn:aws:kms:us-east-1:1:key/2222", managed) is True
    assert customer_key("arn:aws:kms:us-east-1:1:key/2222", None) is None


@pytest.mark.parametrize(
    ("ebs", "by_default", "expected"),
    [
        ({"Encrypted": False}, True, (False, False)),
        ({}, True, (True, None)),  # the account's default key may be a customer key
        ({}, False, (False, False)),
        ({"SnapshotId": "snap-1"}, False, (None, None)),  # follows the snapshot
        ({}, None, (None, None)),  # the default could not be read
        ({"Encrypted": True, "KmsKeyId": "arn:aws:kms:us-east-1:1:key/2222"}, None, (True, True)),
    ],
)
def test_launch_template_disks(ebs: dict[str, Any], by_default: bool | None,
                               expected: tuple[bool | None, bool | None]) -> None:
    sections: dict[str, Any] = {
        "launch_templates": [template("lt-1", {"BlockDeviceMappings": [{"Ebs": ebs}]})],
        "kms_aws_managed_aliases": [{"AliasName": "alias/aws/ebs", "TargetKeyId": "1111"}],
    }
    if by_default is not None:
        sections["ebs_encryption_by_default"] = by_default
    disk = normalize(**sections)["lt-1.block_device_mappings[0]"]
    assert (disk.encrypted, disk.customer_key) == expected
    assert ("encrypted" in disk.unknown) == (expected[0] is None)


def test_endpoint_variants_count_their_running_instances() -> None:
    endpoint = {"EndpointName": "e", "EndpointArn": "arn:e", "EndpointStatus": "InService",
                "ProductionVariants": [{"VariantName": "a", "CurrentInstanceCount": 4}],
                "EndpointConfig": {"ProductionVariants": [
                    {"VariantName": "a", "InstanceType": "ml.g5.xlarge",
                     "InitialInstanceCount": 1},
                    {"VariantName": "serverless", "ServerlessConfig": {"MaxConcurrency": 5}}]}}
    found = normalize(endpoints=[endpoint])
    assert set(found) == {"arn:e/a"} and found["arn:e/a"].count == 4
    assert normalize(endpoints=[{**endpoint, "EndpointStatus": "Failed"}]) == {}


def test_the_adapter_does_not_import_boto3_until_it_scans() -> None:
    code = ("import sys, engine.sources.aws, remediations.aws_actions; "
            "print(any(m.split('.')[0] in ('boto3', 'botocore') for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, check=True)
    assert result.stdout.strip() == "False"


def test_training_job_checkpoint_uri_is_normalized() -> None:
    from engine.core.catalog import builtin_catalog
    from engine.sources.aws import region_resources

    job = {"TrainingJobName": "ft", "TrainingJobStatus": "InProgress",
           "EnableManagedSpotTraining": True,
           "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1}}
    with_ckpt = {**job, "TrainingJobName": "ft2",
                 "CheckpointConfig": {"S3Uri": "s3://acme/ckpt/ft2"}}
    scan = {"account": "123456789012", "region": "us-east-1",
            "training_jobs": [job, with_ckpt]}
    found = {r.name: r for r in region_resources(scan, builtin_catalog())}
    assert found["ft"].checkpoint_uri is None
    assert found["ft2"].checkpoint_uri == "s3://acme/ckpt/ft2"
    assert found["ft2"].capacity.value == "spot"
