"""The scheduled Lambda handler against moto in server mode on loopback.

boto3 reaches moto through AWS_ENDPOINT_URL, with fake credentials; the estate is seeded with
GPU instances (on-demand and spot, production, exempt), a CPU instance and volumes. Every AWS call
the handler makes is recorded and checked against the Terraform module's IAM policy: dry-run
calls only reads, enforce only the remediations the module grants.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from engine import lambda_config, lambda_handler
from engine.core.errors import InputError
from engine.lambda_handler import handler, parse_run_config, report_key, run_id_for
from tests.conftest import BUSINESS_HOURS, OFF_HOURS
from tests.test_startup_imports import heavy, imported_modules

if TYPE_CHECKING:
    from tests.prometheus_fixture import PrometheusServer

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")
pytest_plugins = ["tests.prometheus_fixture"]

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
BUCKET = "gpuwarden-reports"
AMI = "ami-12c6146b"
FULL_TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-42"}
PERMISSIONLESS = frozenset({"sts:GetCallerIdentity"})  # IAM cannot deny it; needs no grant

# The Terraform module fills these in (context attributes of EventBridge Scheduler).
SCHEDULER_EVENT: dict[str, Any] = {
    "source": "gpuwarden.schedule",
    "schedule_arn": f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/gpuwarden",
    "scheduled_time": "2026-12-01T03:00:00Z",
    "execution_id": "d32c5kddcf5bb8c3",
    "attempt_number": "1",
}
# An EventBridge rule's scheduled event, as documented.
EVENTBRIDGE_RULE_EVENT: dict[str, Any] = {
    "version": "0", "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
    "detail-type": "Scheduled Event", "source": "aws.events", "account": ACCOUNT,
    "time": "2026-12-01T03:00:00Z", "region": REGION,
    "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/gpuwarden"], "detail": {},
}


@dataclass
class FakeContext:
    aws_request_id: str = "4f6c5a1e-0000-4000-8000-000000000001"
    function_name: str = "gpuwarden-enforcement"


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@dataclass
class Estate:
    endpoint: str
    ids: dict[str, str] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.endpoint)

    def states(self) -> dict[str, str]:
        by_id = {v: k for k, v in self.ids.items()}
        found = {}
        for reservation in self.client("ec2").describe_instances()["Reservations"]:
            for instance in reservation["Instances"]:
                if instance["InstanceId"] in by_id:
                    found[by_id[instance["InstanceId"]]] = instance["State"]["Name"]
        return found

    def objects(self, *, history: bool = False) -> dict[str, bytes]:
        """The bucket's objects: the reports and audit logs, or (`history`) the run history."""
        s3 = self.client("s3")
        listed = s3.list_objects_v2(Bucket=BUCKET).get("Contents") or []
        return {o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
                for o in listed if ("/history/" in o["Key"]) == history}


def _run_instance(ec2: Any, instance_type: str, tags: dict[str, str], *, spot: bool = False
                  ) -> str:
    extra = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    response = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType=instance_type,
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        **extra)
    return str(response["Instances"][0]["InstanceId"])


@pytest.fixture
def estate(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Estate:
    """A fresh moto account with the environment a Lambda function would see."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset",
                                                  method="POST"), timeout=10).close()
    for name in list(os.environ):
        if name.startswith(("AWS_", "GPUWARDEN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the function's /tmp

    found = Estate(moto_endpoint)
    ec2 = found.client("ec2")
    found.ids["dev-gpu"] = _run_instance(ec2, "p3.2xlarge", {"env": "dev", **FULL_TAGS})
    found.ids["dev-spot-gpu"] = _run_instance(ec2, "g5.xlarge", {"env": "dev"}, spot=True)
    found.ids["prod-gpu"] = _run_instance(ec2, "p3.2xlarge", {"Env": "Production", **FULL_TAGS})
    found.ids["exempt-gpu"] = _run_instance(
        ec2, "g5.xlarge", {"env": "dev", "gpuwarden-exempt": "gpu-off-hours-shutdown"})
    found.ids["cpu"] = _run_instance(ec2, "m5.large", {"env": "dev"})
    ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=50, Encrypted=False)
    return found


@pytest.fixture
def bucket(estate: Estate, monkeypatch: pytest.MonkeyPatch) -> str:
    estate.client("s3").create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("GPUWARDEN_REPORT_BUCKET", BUCKET)
    return BUCKET


@pytest.fixture
def api_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every AWS API call made from now on, as its IAM action (`ec2:DescribeInstances`)."""
    from botocore.client import BaseClient

    calls: list[str] = []
    original: Callable[..., Any] = BaseClient._make_api_call

    def recording(self: Any, operation_name: str, api_params: Any) -> Any:
        calls.append(f"{self.meta.service_model.signing_name}:{operation_name}")
        return original(self, operation_name, api_params)

    monkeypatch.setattr(BaseClient, "_make_api_call", recording)
    return calls


def logged(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The handler's stdout, one JSON object per line (a line that is not JSON fails here)."""
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def granted(*remediations: str) -> frozenset[str]:
    from tests.test_scheduled_enforcement_tf import module_iam_actions

    read_only, mutating = module_iam_actions()
    allowed = set(read_only) | PERMISSIONLESS | {"s3:PutObject"}
    for name in remediations:
        allowed |= mutating[name]
    return frozenset(allowed)


# ------------------------------------------------------------------------------ dry-run


def test_dry_run_writes_the_report_and_changes_nothing(
    estate: Estate, bucket: str, api_calls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = estate.states()

    summary = handler({**SCHEDULER_EVENT, "now": OFF_HOURS.isoformat()}, FakeContext())
    made = list(api_calls)

    assert estate.states() == before
    run_id = "20261201T030000Z-d32c5kddcf5bb8c3"
    key = f"gpuwarden/2026/12/01/{run_id}.json"
    assert summary["run_id"] == run_id and summary["mode"] == "dry-run"
    assert summary["report"] == f"s3://{bucket}/{key}" and summary["audit_log"] is None
    assert summary["remediations"]["applied"] == 0 and summary["remediations"]["planned"] >= 2
    assert summary["errors"] == [] and summary["resources"] >= 6

    assert set(estate.objects()) == {key}
    head = estate.client("s3").head_object(Bucket=bucket, Key=key)
    assert head["ServerSideEncryption"] == "AES256"
    assert head["ContentType"] == "application/json"
    report = json.loads(estate.objects()[key])
    assert report["schema"] == "gpuwarden.report/v1" and report["mode"] == "dry-run"
    assert report["summary"]["findings"] == summary["findings"]
    off_hours = {f["resource"]["id"]: f["remediation"] for f in report["findings"]
                 if f["policy"] == "gpu-off-hours-shutdown"}
    assert set(off_hours) == {estate.ids["dev-gpu"], estate.ids["dev-spot-gpu"]}
    assert all(r["status"] == "planned" and r["detail"].startswith("would stop")
               for r in off_hours.values())

    # Dry-run read, and wrote only the report.
    writes = [c for c in made if c.split(":")[1].startswith(
        ("Stop", "Create", "Update", "Put", "Tag", "Delete", "Modify", "Add"))]
    assert writes == ["s3:PutObject", "s3:PutObject"]  # the report, the run's history
    assert set(made) <= granted(), set(made) - granted()

    lines = logged(capsys)
    assert [line["phase"] for line in lines] == [
        "start", "policies", "scan", "evaluate", "store", "history", "done"]
    assert {line["run_id"] for line in lines} == {run_id}
    assert {line["request_id"] for line in lines} == {FakeContext.aws_request_id}
    assert all("duration_ms" in line for line in lines if line["phase"] != "start")
    scan = next(line for line in lines if line["phase"] == "scan")
    assert scan["resources"] == summary["resources"]


def test_eventbridge_rule_event_runs_with_environment_defaults(
    estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWARDEN_REGIONS", REGION)
    monkeypatch.setenv("GPUWARDEN_REPORT_PREFIX", "/reports/gpu/")
    monkeypatch.setenv("GPUWARDEN_POLICIES", "builtin")

    summary = handler(EVENTBRIDGE_RULE_EVENT, FakeContext())

    assert summary["mode"] == "dry-run" and summary["regions"] == [REGION]
    assert summary["run_id"].endswith("-89d1a02d-5ec7-412e-82f5-13505f849b41")
    (key,) = estate.objects()
    assert key.startswith("reports/gpu/") and key.endswith(f"/{summary['run_id']}.json")
    assert summary["report"] == f"s3://{bucket}/{key}"


def test_fan_out_item_assumes_the_role_and_scans_its_region(
    estate: Estate, bucket: str, api_calls: list[str]
) -> None:
    role = f"arn:aws:iam::{ACCOUNT}:role/gpuwarden-scan"
    item = {"account": ACCOUNT, "role_arn": role, "regions": [REGION], "now": OFF_HOURS.isoformat()}

    summary = handler(item, FakeContext(aws_request_id="req-fan-out"))

    assert summary["role_arns"] == [role] and summary["regions"] == [REGION]
    assert summary["regions_scanned"] == [f"{ACCOUNT}/{REGION}"]
    assert summary["resources"] >= 6 and summary["errors"] == []
    assert "sts:AssumeRole" in api_calls
    assert summary["run_id"] == "20261201T030000Z-req-fan-out"


def test_missing_bucket_returns_the_summary_and_warns(
    estate: Estate, api_calls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())

    assert summary["report"] is None and summary["findings"] > 0 and summary["errors"] == []
    assert "s3:PutObject" not in api_calls
    warnings = [line for line in logged(capsys) if line["level"] == "warning"]
    assert [w["phase"] for w in warnings] == ["store"]
    assert "GPUWARDEN_REPORT_BUCKET is not set" in warnings[0]["warning"]


def test_unwritable_bucket_is_logged_as_an_error_and_the_run_completes(
    estate: Estate, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUWARDEN_REPORT_BUCKET", "no-such-bucket")

    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())

    assert summary["report"] is None and summary["findings"] > 0
    assert len(summary["errors"]) == 2 and all("no-such-bucket" in e for e in summary["errors"])
    assert summary["history"] is None  # its history goes to the same bucket
    errors = [line for line in logged(capsys) if line["level"] == "error"]
    assert [e["phase"] for e in errors] == ["store", "history"]
    assert all("NoSuchBucket" in e["error"] for e in errors)


# ------------------------------------------------------------------------------ telemetry

# The Prometheus fixture's `ec2-host` scenario: a GPU at 3% activity on this host.
TELEMETRY_HOST = "ip-10-1-2-3.ec2.internal"


def _instance_at(estate: Estate, private_ip: str) -> str:
    ec2 = estate.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.2.0/24",
                               AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    (instance,) = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="g5.xlarge", SubnetId=subnet,
        PrivateIpAddress=private_ip,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": k, "Value": v} for k, v in {"env": "dev", **FULL_TAGS}.items()]}],
    )["Instances"]
    assert instance["PrivateDnsName"] == TELEMETRY_HOST
    return str(instance["InstanceId"])


def _report(estate: Estate, summary: dict[str, Any]) -> dict[str, Any]:
    key = summary["report"].removeprefix(f"s3://{BUCKET}/")
    report: dict[str, Any] = json.loads(estate.objects()[key])
    return report


def test_prometheus_telemetry_judges_the_instances_gpus(
    estate: Estate, bucket: str, dcgm_prometheus: PrometheusServer,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Without telemetry the instance's idleness is unknown; with the environment's Prometheus
    (TLS, basic auth) its readings join it by private DNS name, as in `gpuwarden scan`."""
    host = _instance_at(estate, "10.1.2.3")
    event = {"now": dcgm_prometheus.end.isoformat(), "telemetry_window": 3600}

    blind = handler(event, FakeContext(aws_request_id="blind"))
    idle = {f["resource"]["id"]: f for f in _report(estate, blind)["findings"]
            if f["policy"] == "gpu-idle"}
    assert idle[host]["result"] == "unknown"
    assert "telemetry" not in [line["phase"] for line in logged(capsys)]

    monkeypatch.setenv("GPUWARDEN_PROMETHEUS_URL", dcgm_prometheus.url)
    monkeypatch.setenv("GPUWARDEN_PROMETHEUS_CA", dcgm_prometheus.ca_file)
    if dcgm_prometheus.basic_auth:
        monkeypatch.setenv("GPUWARDEN_PROMETHEUS_BASIC_AUTH", dcgm_prometheus.basic_auth)
    seen = handler(event, FakeContext(aws_request_id="seen"))

    assert seen["errors"] == [] and "error" not in seen
    findings = _report(estate, seen)["findings"]
    idle = {f["resource"]["id"]: f for f in findings if f["policy"] == "gpu-idle"}
    assert idle[host]["result"] == "fail"
    assert idle[host]["details"]["average_activity_pct"] == pytest.approx(3.0)
    assert idle[host]["remediation"]["detail"].startswith("would stop")
    # the GPUs Prometheus sees on no instance of the account are reported as unowned
    assert any(f["resource"]["kind"] == "unowned_gpu" for f in findings)
    assert seen["resources"] > blind["resources"]
    lines = logged(capsys)
    assert [line["phase"] for line in lines if line["level"] == "info"] == [
        "start", "policies", "scan", "telemetry", "evaluate", "store", "history", "done"]
    start = next(line for line in lines if line["phase"] == "start")
    assert start["telemetry"] == ["prometheus"]
    telemetry = next(line for line in lines if line["phase"] == "telemetry")
    assert telemetry["with_telemetry"] >= 1 and telemetry["resources"] == seen["resources"]


def test_an_unreachable_prometheus_leaves_gpus_unknown_and_warns(
    estate: Estate, bucket: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("GPUWARDEN_PROMETHEUS_URL", f"http://127.0.0.1:{port}")

    summary = handler({"now": OFF_HOURS.isoformat()}, FakeContext())

    assert "error" not in summary and summary["warnings"]
    idle = [f for f in _report(estate, summary)["findings"] if f["policy"] == "gpu-idle"]
    assert idle and {f["result"] for f in idle} == {"unknown"}
    warnings = [line for line in logged(capsys) if line["level"] == "warning"]
    assert any(str(port) in w["warning"] for w in warnings)


def test_telemetry_settings_from_the_environment_and_the_event() -> None:
    environment = {"GPUWARDEN_PROMETHEUS_URL": "https://prometheus.internal:9090",
                   "GPUWARDEN_PROMETHEUS_TOKEN": "t0ken",
                   "GPUWARDEN_PROMETHEUS_BASIC_AUTH": "user:pass",
                   "GPUWARDEN_PROMETHEUS_CA": "/var/task/ca.pem",
                   "GPUWARDEN_DCGM_URL": "http://10.0.0.7:9400/metrics",
                   "GPUWARDEN_TELEMETRY_WINDOW": "7200"}

    defaults = parse_run_config({}, environment).telemetry
    assert (defaults.prometheus_url, defaults.prometheus_token, defaults.prometheus_basic_auth,
            defaults.prometheus_ca, defaults.dcgm_url, defaults.window_s) == (
        "https://prometheus.internal:9090", "t0ken", "user:pass", "/var/task/ca.pem",
        "http://10.0.0.7:9400/metrics", 7200)
    same = parse_run_config({"prometheus_url": "https://prometheus.internal:9090",
                             "telemetry_window": 600}, environment).telemetry
    assert (same.prometheus_token, same.window_s) == ("t0ken", 600)
    # an event naming another server never takes the environment's credentials with it
    other = parse_run_config({"detail": {"prometheus_url": "https://elsewhere.example"}},
                             environment).telemetry
    assert other.prometheus_url == "https://elsewhere.example"
    assert (other.prometheus_token, other.prometheus_basic_auth) == (None, None)
    assert parse_run_config(None, {}).telemetry == lambda_config.TelemetryConfig()


# ------------------------------------------------------------------------------ enforce


def at(monkeypatch: pytest.MonkeyPatch, instant: Any) -> None:
    """The run's clock (an event's `now` is refused in enforce mode)."""
    monkeypatch.setattr(lambda_handler, "utc_now", lambda: instant)


def test_enforce_outside_business_hours_stops_only_non_production_gpus(
    estate: Estate, bucket: str, api_calls: list[str], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ec2 = estate.client("ec2")
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a", Size=100, Encrypted=True,
        TagSpecifications=[{"ResourceType": "volume", "Tags": [
            {"Key": "gpuwarden:snapshot-before-stop", "Value": "true"}]}])["VolumeId"]
    ec2.attach_volume(VolumeId=volume, InstanceId=estate.ids["dev-gpu"], Device="/dev/sdf")
    seeding = len(api_calls)
    at(monkeypatch, OFF_HOURS)

    summary = handler({**SCHEDULER_EVENT, "mode": "enforce"}, FakeContext())
    made = api_calls[seeding:]

    assert estate.states() == {"dev-gpu": "stopped", "dev-spot-gpu": "stopped",
                               "prod-gpu": "running", "exempt-gpu": "running", "cpu": "running"}
    assert summary["mode"] == "enforce" and summary["remediations"]["applied"] == 2
    assert summary["remediations"]["failed"] == 0
    snapshots = ec2.describe_snapshots(Filters=[{"Name": "volume-id", "Values": [volume]}])
    assert len(snapshots["Snapshots"]) == 1

    base = "gpuwarden/2026/12/01/20261201T030000Z-d32c5kddcf5bb8c3"
    objects = estate.objects()
    assert set(objects) == {f"{base}.json", f"{base}.audit.jsonl"}
    assert summary["audit_log"] == f"s3://{bucket}/{base}.audit.jsonl"
    head = estate.client("s3").head_object(Bucket=bucket, Key=f"{base}.audit.jsonl")
    assert head["ServerSideEncryption"] == "AES256"
    audit = [json.loads(line) for line in objects[f"{base}.audit.jsonl"].splitlines()]
    applied = {r["resource"] for r in audit if r["phase"] == "after" and r["result"] == "applied"}
    assert applied == {estate.ids["dev-gpu"], estate.ids["dev-spot-gpu"]}
    report = json.loads(objects[f"{base}.json"])
    assert report["mode"] == "enforce"
    statuses = {f["resource"]["id"]: f["remediation"]["status"] for f in report["findings"]
                if f["policy"] == "gpu-off-hours-shutdown"}
    assert statuses == {estate.ids["dev-gpu"]: "applied", estate.ids["dev-spot-gpu"]: "applied"}

    # The audit trail is in CloudWatch too, and /tmp holds no leftover for the next run.
    lines = logged(capsys)
    assert len([line for line in lines if line["phase"] == "audit"]) == len(audit)
    assert not list(Path(lambda_handler_tmp()).glob("gpuwarden-audit-*"))
    # Everything it called, the Terraform module's enforce role (default remediations) grants.
    allowed = granted("stop", "snapshot-before-stop")
    assert set(made) <= allowed, set(made) - allowed
    assert {"ec2:StopInstances", "ec2:CreateSnapshot"} <= set(made)


def lambda_handler_tmp() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_enforce_respects_the_blast_radius(estate: Estate, bucket: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    at(monkeypatch, OFF_HOURS)
    summary = handler({"mode": "enforce", "max_actions": 1}, FakeContext())

    states = estate.states()
    stopped = sorted(name for name, state in states.items() if state == "stopped")
    assert len(stopped) == 1 and stopped[0] in ("dev-gpu", "dev-spot-gpu")
    assert summary["remediations"]["applied"] == 1


def test_enforce_in_business_hours_stops_nothing(estate: Estate, bucket: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    at(monkeypatch, BUSINESS_HOURS)
    summary = handler({"mode": "enforce"}, FakeContext())

    assert set(estate.states().values()) == {"running"}
    assert summary["remediations"]["applied"] == 0 and summary["audit_log"] is None


def test_enforce_twice_is_idempotent(estate: Estate, bucket: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    at(monkeypatch, OFF_HOURS)
    event = {"mode": "enforce"}
    first = handler(event, FakeContext(aws_request_id="first"))
    second = handler(event, FakeContext(aws_request_id="second"))

    assert first["remediations"]["applied"] == 2
    assert second["remediations"]["applied"] == 0 and second["remediations"]["failed"] == 0


# ------------------------------------------------------------------------------ bad input

BAD_EVENTS: list[tuple[object, str]] = [
    ("run now", "event must be a JSON object, not a string"),
    ([{"mode": "enforce"}], "event must be a JSON object, not a list"),
    ({"regoins": ["us-east-1"]}, "unknown event field 'regoins'"),
    ({"mode": "yes"}, "event field 'mode': 'yes' is not one of dry-run, enforce"),
    ({"regions": "us-east-1"}, "'regions' must be a non-empty list of strings, not a string"),
    ({"regions": []}, "'regions' must be a non-empty list"),
    ({"regions": ["us east 1"]}, "'us east 1' is not an AWS region name"),
    ({"policies": [""]}, "'policies': '' is not a non-empty string"),
    ({"role_arns": ["arn:aws:iam::12:role/x"]}, "is not an IAM role ARN"),
    ({"role_arn": ["arn:aws:iam::123456789012:role/x"]}, "'role_arn' must be a string"),
    ({"role_arn": "arn:aws:iam::123456789012:role/x",
      "role_arns": ["arn:aws:iam::123456789012:role/y"]}, "give one of them"),
    ({"max_actions": -1}, "max_actions' must be a whole number, 0 or more, not -1"),
    ({"max_actions": True}, "not True"),
    ({"max_actions": "5"}, "not '5'"),
    ({"now": "yesterday"}, "not an ISO 8601 instant: 'yesterday'"),
    ({"now": 1764558000}, "'now' must be an ISO 8601 string, not a number"),
    ({**EVENTBRIDGE_RULE_EVENT, "detail": {"mode": "enforce", "force": True}},
     "unknown field 'detail.force'"),
    ({"prometheus_url": "file:///etc/passwd"}, "'prometheus_url': 'file:///etc/passwd' is not"),
    ({"prometheus_url": "http://"}, "is not an http(s) URL"),
    ({"prometheus_url": "http://a b"}, "is not an http(s) URL"),
    ({"prometheus_url": ["http://x"]}, "'prometheus_url' must be a string, not a list"),
    ({"dcgm_url": "https://x/" + "a" * 2000}, "'dcgm_url'"),
    ({"telemetry_window": 59}, "'telemetry_window' must be a whole number of seconds from 60"),
    ({"telemetry_window": "3600"}, "not '3600'"),
    ({"telemetry_window": 10**9}, "to 2678400"),
]


@pytest.mark.parametrize(("event", "message"), BAD_EVENTS,
                         ids=[str(i) for i in range(len(BAD_EVENTS))])
def test_bad_event_is_an_error_result_not_a_traceback(
    estate: Estate, api_calls: list[str], capsys: pytest.CaptureFixture[str],
    event: object, message: str
) -> None:
    result = handler(event, FakeContext())

    assert set(result) == {"error"} and message in result["error"]
    (line,) = logged(capsys)
    assert line["level"] == "error" and line["phase"] == "config"
    assert line["error"] == result["error"]
    assert api_calls == []  # rejected before anything was read


BAD_ENVIRONMENTS: list[tuple[dict[str, str], object, str]] = [
    ({"GPUWARDEN_MODE": "enforcing"}, {}, "GPUWARDEN_MODE: 'enforcing' is not one of"),
    ({"GPUWARDEN_MAX_ACTIONS": "ten"}, {}, "GPUWARDEN_MAX_ACTIONS: 'ten' is not a whole number"),
    ({"GPUWARDEN_MAX_ACTIONS": "-2"}, {}, "GPUWARDEN_MAX_ACTIONS must be a whole number, 0"),
    ({"GPUWARDEN_REGIONS": "us-east-1,Frankfurt"}, {}, "'Frankfurt' is not an AWS region"),
    ({"GPUWARDEN_ROLE_ARNS": "gpuwarden-scan"}, {}, "GPUWARDEN_ROLE_ARNS: 'gpuwarden-scan'"),
    ({"GPUWARDEN_REPORT_SSE": "aes"}, {}, "GPUWARDEN_REPORT_SSE: 'aes' is not one of"),
    ({"GPUWARDEN_PROMETHEUS_URL": "prometheus:9090"}, {}, "GPUWARDEN_PROMETHEUS_URL: "),
    ({"GPUWARDEN_TELEMETRY_WINDOW": "1h"}, {}, "GPUWARDEN_TELEMETRY_WINDOW: '1h' is not a whole"),
    ({"GPUWARDEN_TELEMETRY_WINDOW": "30"}, {}, "GPUWARDEN_TELEMETRY_WINDOW must be a whole"),
    ({"GPUWARDEN_ALLOW_ENFORCE": "maybe"}, {"mode": "enforce"}, "'maybe' is not true or false"),
    ({"GPUWARDEN_ALLOW_ENFORCE": "false"}, {"mode": "enforce"},
     "mode 'enforce' is not allowed here"),
    ({"GPUWARDEN_ALLOW_ENFORCE": "false", "GPUWARDEN_MODE": "enforce"}, {},
     "mode 'enforce' is not allowed here"),
]


@pytest.mark.parametrize(("environment", "event", "message"), BAD_ENVIRONMENTS,
                         ids=[str(i) for i in range(len(BAD_ENVIRONMENTS))])
def test_bad_environment_is_an_error_result(
    estate: Estate, api_calls: list[str], monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str], event: object, message: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    result = handler(event, FakeContext())

    assert set(result) == {"error"} and message in result["error"], result
    assert api_calls == []


def test_unreadable_policy_is_an_error_result_with_the_run_id(
    estate: Estate, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: gpuwarden.io/v1\npolicies:\n  - id: [not, a, string]\n")
    monkeypatch.setenv("LAMBDA_TASK_ROOT", str(tmp_path))  # the package root

    result = handler({"policies": ["broken.yaml"], "now": OFF_HOURS.isoformat()}, FakeContext())

    assert set(result) == {"error", "run_id"} and str(broken) in result["error"]
    errors = [line for line in logged(capsys) if line["level"] == "error"]
    assert [e["phase"] for e in errors] == ["run"]


def test_unexpected_failure_is_logged_then_raised(
    estate: Estate, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(*args: object) -> None:
        raise RuntimeError("adapter bug")

    monkeypatch.setattr("engine.sources.registry.collect_sources", explode)

    with pytest.raises(RuntimeError, match="adapter bug"):
        handler({}, FakeContext())

    (error,) = [line for line in logged(capsys) if line["level"] == "error"]
    assert error["error_type"] == "RuntimeError" and error["phase"] == "run"


# ------------------------------------------------------------------------------ pure parts


def test_event_overrides_environment_defaults() -> None:
    environment = {"GPUWARDEN_MODE": "enforce", "GPUWARDEN_REGIONS": "us-east-1, eu-west-1",
                   "GPUWARDEN_MAX_ACTIONS": "7", "GPUWARDEN_POLICIES": "builtin,extra.yaml",
                   "GPUWARDEN_ROLE_ARNS": f"arn:aws:iam::{ACCOUNT}:role/a",
                   "GPUWARDEN_REPORT_KMS_KEY_ID": "alias/reports"}

    defaults = parse_run_config({}, environment)
    assert (defaults.mode, defaults.regions, defaults.max_actions, defaults.policies) == (
        "enforce", ("us-east-1", "eu-west-1"), 7, ("builtin", "extra.yaml"))
    assert (defaults.sse, defaults.kms_key_id) == ("aws:kms", "alias/reports")

    overridden = parse_run_config({"mode": "dry-run", "regions": ["all"], "max_actions": 0,
                                   "role_arn": f"arn:aws:iam::{ACCOUNT}:role/b"}, environment)
    assert (overridden.mode, overridden.regions, overridden.max_actions) == (
        "dry-run", ("all",), 0)
    assert overridden.role_arns == (f"arn:aws:iam::{ACCOUNT}:role/b",)
    assert overridden.policies == defaults.policies

    plain = parse_run_config(None, {})
    assert (plain.mode, plain.policies, plain.max_actions, plain.bucket, plain.sse) == (
        "dry-run", ("builtin",), 10, None, "AES256")


def test_detail_of_a_custom_event_carries_overrides() -> None:
    event = {**EVENTBRIDGE_RULE_EVENT, "detail-type": "gpuwarden run",
             "detail": {"mode": "enforce", "max_actions": 2}}
    config = parse_run_config(event, {})
    assert (config.mode, config.max_actions, config.trigger_id) == (
        "enforce", 2, EVENTBRIDGE_RULE_EVENT["id"])


def test_unfilled_scheduler_placeholder_is_no_run_id() -> None:
    config = parse_run_config({"execution_id": "<aws.scheduler.execution-id>"}, {})
    assert config.trigger_id is None
    with pytest.raises(InputError):
        parse_run_config({"now": "2026-13-01T00:00:00Z"}, {})


def test_run_ids_and_keys() -> None:
    assert run_id_for(OFF_HOURS, "exec/1 2") == "20261201T030000Z-exec-1-2"
    generated = run_id_for(OFF_HOURS, None)
    prefix = "20261201T030000Z-"
    assert generated.startswith(prefix) and len(generated) == len(prefix) + 16
    assert generated != run_id_for(OFF_HOURS, None)
    assert report_key("a/b", OFF_HOURS, "r1") == "a/b/2026/12/01/r1.json"
    assert report_key("", OFF_HOURS, "r1", ".audit.jsonl") == "2026/12/01/r1.audit.jsonl"


# ------------------------------------------------------------------------------ cold start


def _python(code: str, env: dict[str, str] | None = None, *flags: str
            ) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=REPO, env=base,
                          capture_output=True, text=True, timeout=120, check=False)


def test_importing_the_handler_imports_no_sdk_nor_the_engine() -> None:
    result = _python("import engine.lambda_handler", None, "-X", "importtime")

    assert result.returncode == 0, result.stderr
    names = imported_modules(result.stderr)
    assert "engine.lambda_handler" in names
    assert heavy(names) == [], f"provider SDKs imported at module level: {heavy(names)}"
    assert not {"engine.sources.aws", "engine.pipeline", "engine.core.evaluate",
                "remediations.enforce", "pydantic"} & names


def test_a_run_imports_only_the_aws_adapter(estate: Estate, bucket: str) -> None:
    code = ("import json, sys\nimport engine.lambda_handler as h\n"
            f"summary = h.handler({{'now': '{OFF_HOURS.isoformat()}'}}, None)\n"
            "assert 'error' not in summary, summary\n"
            "print(json.dumps(sorted(sys.modules)))")
    result = _python(code, dict(os.environ))

    assert result.returncode == 0, result.stderr[-2000:]
    modules = set(json.loads(result.stdout.splitlines()[-1]))
    assert {"engine.sources.aws", "boto3"} <= modules
    assert heavy(modules) == ["boto3", "botocore"]
    assert not {m for m in modules if m.startswith(("engine.sources.gcp", "engine.sources.azure",
                                                    "engine.webhook", "typer", "rich"))}


# ------------------------------------------------------------------------------ the zip


def test_build_script_packages_the_wheel_layout_reproducibly(tmp_path: Path) -> None:
    def build(name: str) -> Path:
        output = tmp_path / name
        result = subprocess.run(
            ["bash", str(REPO / "scripts" / "build-lambda.sh"), "--no-deps", "-o", str(output)],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "LAMBDA_PYTHON": sys.executable + "-absent"})
        assert result.returncode == 0, result.stderr
        assert f"{output}:" in result.stdout and "MiB zipped" in result.stdout
        return output

    first, second = build("a.zip"), build("b.zip")
    assert hashlib.sha256(first.read_bytes()).digest() == \
        hashlib.sha256(second.read_bytes()).digest()

    with zipfile.ZipFile(first) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "task")
    assert {"engine/lambda_handler.py", "engine/sources/aws/__init__.py",
            "remediations/aws_actions.py", "engine/builtin_policies/gpu.yaml",
            "engine/data/catalog/gpu_instances.csv"} <= names
    assert not [n for n in names if n.startswith(("tests/", "terraform/", "bench/", "docs/"))
                or ("__pycache__" in n and not n.endswith(".pyc"))]

    # From the unpacked zip (as /var/task), the built-in pack and catalog are found.
    task = tmp_path / "task"
    code = ("import engine, engine.lambda_handler\n"
            "from engine.loading.policies import builtin_pack_dir, load_policies\n"
            "from engine.core.catalog import builtin_catalog\n"
            "print(engine.__file__)\nprint(builtin_pack_dir())\n"
            "print(len(load_policies(['builtin'])))\nbuiltin_catalog()")
    result = subprocess.run([sys.executable, "-c", code], cwd=task, capture_output=True,
                            text=True, timeout=120, check=False,
                            env={**os.environ, "PYTHONPATH": str(task)})
    assert result.returncode == 0, result.stderr
    engine_file, pack, count = result.stdout.split()
    assert Path(engine_file).is_relative_to(task)
    assert Path(pack) == task / "engine" / "builtin_policies"
    from engine.loading.policies import load_policies

    assert int(count) == len(load_policies(["builtin"]))


def test_runtime_docs_name_every_field_and_variable_and_their_links_resolve() -> None:
    import re

    from tests.test_docs_examples import anchors

    page = REPO / "docs" / "runtime.md"
    docs = page.read_text("utf-8")
    for name in sorted(lambda_config.OVERRIDE_FIELDS | lambda_config.SCHEDULER_FIELDS):
        assert f"`{name}`" in docs, name
    for name, value in vars(lambda_config).items():
        if name.startswith("ENV_"):
            assert f"`{value}`" in docs, value
    prose = re.sub(r"^```.*?^```$", "", docs, flags=re.M | re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    assert len(links) >= 5
    for target in links:
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.exists(), f"broken link {target}"
        if anchor:
            assert anchor in anchors(path), f"no heading for #{anchor} in {path.name}"
