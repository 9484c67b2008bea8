"""AWS test fixtures: moto in server mode on loopback, boto3 pointed at it through
AWS_ENDPOINT_URL, fake credentials, and a seeded GPU estate in two regions.

Test modules import the fixture functions (`moto_endpoint_fixture`, `aws_fixture`,
`estate_fixture`; the fixtures are named `moto_endpoint`, `aws`, `estate`) and its helpers.
The server runs in a thread of the test process, so tests can also reach moto's backends where
its API has a gap (a training job's status; tags on EKS node groups, see `_tag_node_groups`).
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from engine.sources.aws import clients as aws_clients

ACCOUNT = "123456789012"  # moto's default account
OTHER_ACCOUNT = "111111111111"
EAST, WEST = "us-east-1", "us-west-2"
ROLE = "arn:aws:iam::{account}:role/gpuwarden-audit"
COST_TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-42"}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


@pytest.fixture(scope="session", name="moto_endpoint")
def moto_endpoint_fixture() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    restore = _tag_node_groups()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        restore()
        server.stop()


def _tag_node_groups() -> Callable[[], None]:
    """moto's EKS TagResource and UntagResource only know clusters; real EKS tags node groups
    too."""
    from moto.core.responses import EmptyResult
    from moto.eks.models import EKSBackend
    from moto.eks.responses import EKSResponse

    original = EKSBackend.tag_resource

    def tag_resource(self: Any, resource_arn: str, tags: dict[str, str]) -> None:
        for cluster in self.clusters.values():
            for group in cluster.nodegroups.values():
                if group.arn == resource_arn:
                    group.tags.update(tags)
                    return
        original(self, resource_arn, tags)

    original_untag = EKSBackend.untag_resource

    def untag_resource(self: Any, resource_arn: str, tag_keys: list[str]) -> None:
        for cluster in self.clusters.values():
            for group in cluster.nodegroups.values():
                if group.arn == resource_arn:
                    for key in tag_keys if isinstance(tag_keys, list) else [tag_keys]:
                        group.tags.pop(key, None)
                    return
        original_untag(self, resource_arn, tag_keys)

    original_response = EKSResponse.untag_resource

    def untag_response(self: Any) -> Any:  # every tagKeys value, not only the first
        self.eks_backend.untag_resource(self._extract_arn_from_path(),
                                        list(self.querystring.get("tagKeys") or []))
        return EmptyResult()

    EKSBackend.tag_resource = tag_resource  # type: ignore[method-assign]
    EKSBackend.untag_resource = untag_resource  # type: ignore[method-assign]
    EKSResponse.untag_resource = untag_response  # type: ignore[method-assign]

    def restore() -> None:
        EKSBackend.tag_resource = original  # type: ignore[method-assign]
        EKSBackend.untag_resource = original_untag  # type: ignore[method-assign]
        EKSResponse.untag_resource = original_response  # type: ignore[method-assign]

    return restore


_SEED_SESSION: dict[str, Any] = {}
_SEED_CLIENTS: dict[tuple[str, str, str], Any] = {}


@dataclass
class AwsLab:
    """The moto endpoint and plain boto3 clients (without gpuwarden's hooks) to seed and
    inspect it."""

    endpoint: str
    hooks: list[Callable[[Any], None]]
    calls: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)

    def client(self, service: str, region: str = EAST, session: Any = None) -> Any:
        import boto3

        if session is not None:
            return session.client(service, region_name=region)
        # Clients are shared by the tests: making one parses botocore's models (a second each).
        key = (self.endpoint, service, region)
        if key not in _SEED_CLIENTS:
            _SEED_CLIENTS[key] = _SEED_SESSION.setdefault("session", boto3.Session()).client(
                service, region_name=region)
        return _SEED_CLIENTS[key]

    def record_calls(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        """Record (region, service, operation, params) of every call gpuwarden makes."""

        def hook(client: Any) -> None:
            region = client.meta.region_name
            service = client.meta.service_model.service_name

            def record(model: Any, params: dict[str, Any], **_: Any) -> None:
                self.calls.append((region, service, model.name, dict(params)))

            client.meta.events.register("provide-client-params", record)

        self.hooks.append(hook)
        return self.calls

    def mutating_calls(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        return [call for call in self.calls if not is_read_only(call[2])]

    def session_for(self, account: str) -> Any:
        """A boto3 session acting in `account` (moto maps assumed-role keys to accounts)."""
        import boto3

        credentials = self.client("sts").assume_role(
            RoleArn=ROLE.format(account=account), RoleSessionName="seed")["Credentials"]
        return boto3.Session(aws_access_key_id=credentials["AccessKeyId"],
                             aws_secret_access_key=credentials["SecretAccessKey"],
                             aws_session_token=credentials["SessionToken"])


def is_read_only(operation: str) -> bool:
    return operation.startswith(("Describe", "List", "Get")) or operation == "AssumeRole"


@pytest.fixture(name="aws")
def aws_fixture(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> AwsLab:
    """A fresh moto state, fake credentials in the environment, and an empty hook list."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", EAST)
    monkeypatch.setenv("AWS_REGION", EAST)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    request = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=120):  # slow on a loaded machine
        pass
    hooks: list[Callable[[Any], None]] = []
    monkeypatch.setattr(aws_clients, "CLIENT_HOOKS", hooks)
    return AwsLab(moto_endpoint, hooks)


# ---------------------------------------------------------------------------- the estate


@dataclass
class Estate:
    """Ids of what was seeded, by the name the tests use."""

    ids: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        return self.ids[name]


# One of the images moto registers in every region (listing them all takes a second).
IMAGE = "ami-12c6146b"


def run_instance(ec2: Any, instance_type: str, tags: dict[str, str], *, spot: bool = False,
                 encrypted: bool = True, kms_key: str | None = None) -> str:
    ebs: dict[str, Any] = {"VolumeSize": 8, "Encrypted": encrypted}
    if kms_key:
        ebs["KmsKeyId"] = kms_key
    params: dict[str, Any] = {
        "ImageId": IMAGE, "MinCount": 1, "MaxCount": 1, "InstanceType": instance_type,
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": ebs}],
    }
    if tags:
        params["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tag_list(tags)}]
    if spot:
        params["InstanceMarketOptions"] = {"MarketType": "spot"}
    return str(ec2.run_instances(**params)["Instances"][0]["InstanceId"])


def seed_estate(lab: AwsLab) -> Estate:
    estate = Estate()
    ids = estate.ids
    ec2 = lab.client("ec2")
    kms_key = lab.client("kms").create_key(Description="team key")["KeyMetadata"]["Arn"]
    ids["cmk"] = kms_key

    ids["dev"] = run_instance(ec2, "p3.2xlarge", {"Name": "trainer-dev", "env": "dev",
                                                  **COST_TAGS})
    ids["spot"] = run_instance(ec2, "g5.xlarge", {}, spot=True, encrypted=False)
    ids["prod"] = run_instance(ec2, "p4d.24xlarge", {"env": "prod", **COST_TAGS})
    ids["exempt"] = run_instance(ec2, "g5.xlarge", {"gpuwarden-exempt": "gpu-off-hours-shutdown",
                                                    **COST_TAGS})
    ids["cpu"] = run_instance(ec2, "t3.micro", {}, encrypted=False)
    ids["stopped"] = run_instance(ec2, "g5.xlarge", COST_TAGS)
    ec2.stop_instances(InstanceIds=[ids["stopped"]])

    data = ec2.create_volume(AvailabilityZone=f"{EAST}a", Size=100, Encrypted=True,
                             KmsKeyId=kms_key, TagSpecifications=[{
                                 "ResourceType": "volume",
                                 "Tags": tag_list({"gpuwarden:snapshot-before-stop": "true"})}])
    ids["dev-data"] = data["VolumeId"]
    ec2.attach_volume(VolumeId=ids["dev-data"], InstanceId=ids["dev"], Device="/dev/sdf")
    ids["scratch"] = ec2.create_volume(AvailabilityZone=f"{EAST}a", Size=50)["VolumeId"]
    ids["dev-root"] = _root_volume(ec2, ids["dev"])
    ids["spot-root"] = _root_volume(ec2, ids["spot"])
    ids["cpu-root"] = _root_volume(ec2, ids["cpu"])

    template = ec2.create_launch_template(
        LaunchTemplateName="gpu-workers",
        LaunchTemplateData={"InstanceType": "g5.xlarge", "ImageId": IMAGE,
                            "TagSpecifications": [{"ResourceType": "instance",
                                                   "Tags": tag_list(COST_TAGS)}]},
    )["LaunchTemplate"]
    ids["template"] = template["LaunchTemplateId"]
    autoscaling = lab.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="gpu-workers", MinSize=1, MaxSize=4, DesiredCapacity=2,
        LaunchTemplate={"LaunchTemplateName": "gpu-workers", "Version": "$Latest"},
        AvailabilityZones=[f"{EAST}a"],
        Tags=[{"Key": "env", "Value": "dev", "PropagateAtLaunch": True}],
    )
    group = autoscaling.describe_auto_scaling_groups(
        AutoScalingGroupNames=["gpu-workers"])["AutoScalingGroups"][0]
    ids["asg"] = group["AutoScalingGroupARN"]
    ids["asg-member"] = group["Instances"][0]["InstanceId"]

    eks = lab.client("eks")
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    eks.create_cluster(name="ml", roleArn=role, resourcesVpcConfig={"subnetIds": []})
    ids["nodegroup"] = eks.create_nodegroup(
        clusterName="ml", nodegroupName="gpu", nodeRole=role, subnets=["subnet-1"],
        instanceTypes=["g5.xlarge"], capacityType="ON_DEMAND",
        scalingConfig={"minSize": 1, "maxSize": 3, "desiredSize": 2}, tags={"team": "ml"},
    )["nodegroup"]["nodegroupArn"]

    sagemaker = lab.client("sagemaker")
    sagemaker_role = f"arn:aws:iam::{ACCOUNT}:role/sagemaker"
    ids["notebook"] = sagemaker.create_notebook_instance(
        NotebookInstanceName="research", InstanceType="ml.p3.2xlarge", RoleArn=sagemaker_role,
        Tags=tag_list(COST_TAGS))["NotebookInstanceArn"]
    ids["training"] = sagemaker.create_training_job(
        TrainingJobName="finetune", RoleArn=sagemaker_role,
        AlgorithmSpecification={"TrainingImage": "trainer:1", "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://models/out"},
        ResourceConfig={"InstanceType": "ml.p3.2xlarge", "InstanceCount": 2,
                        "VolumeSizeInGB": 50},
        StoppingCondition={"MaxRuntimeInSeconds": 3600}, EnableManagedSpotTraining=True,
    )["TrainingJobArn"]
    _set_training_status(EAST, "finetune", "InProgress")
    sagemaker.create_model(ModelName="ranker", ExecutionRoleArn=sagemaker_role,
                           PrimaryContainer={"Image": "ranker:1"})
    sagemaker.create_endpoint_config(EndpointConfigName="ranker", ProductionVariants=[{
        "VariantName": "main", "ModelName": "ranker", "InstanceType": "ml.g4dn.xlarge",
        "InitialInstanceCount": 3}])
    ids["endpoint"] = sagemaker.create_endpoint(
        EndpointName="ranker", EndpointConfigName="ranker",
        Tags=tag_list({"env": "prod", **COST_TAGS}))["EndpointArn"] + "/main"

    ids["west"] = run_instance(lab.client("ec2", WEST), "g5.xlarge", COST_TAGS)
    return estate


def _root_volume(ec2: Any, instance_id: str) -> str:
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id",
                                             "Values": [instance_id]},
                                            {"Name": "attachment.device",
                                             "Values": ["/dev/sda1"]}])["Volumes"]
    return str(volumes[0]["VolumeId"])


def _set_training_status(region: str, name: str, status: str) -> None:
    """moto finishes training jobs at once; a live scan lists only jobs in progress."""
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[ACCOUNT][region].training_jobs[name].training_job_status = status


@pytest.fixture(name="estate")
def estate_fixture(aws: AwsLab) -> Estate:
    return seed_estate(aws)
