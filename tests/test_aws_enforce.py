"""`scan --source aws --enforce` against moto in server mode: exactly which resources are
stopped or scaled to zero (production and exempt ones untouched), snapshots before stop, the
audit log (a `before` line on disk before each mutating call, then an `after` line), the blast
radius, idempotence, a failure on one resource recorded while the run goes on, and
`mark-violation` tags."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.model import Finding, Remediation, Report, ResourceRef, Severity
from engine.pipeline import build_engine, evaluate_and_plan
from engine.sources.aws import AwsClients, collect
from engine.sources.registry import ScanOptions
from remediations.aws_actions import (
    PREVIOUS_SIZE_TAG,
    VIOLATION_TAG,
    apply_aws_remediations,
)
from tests.conftest import OFF_HOURS, REPO
from tests.conftest_aws import (
    EAST,
    WEST,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
)
from tests.test_cli import run_cli

OFF_HOURS_NOW = "2026-12-01T03:00:00Z"
STOP_TARGETS = ("dev", "spot", "west", "asg", "nodegroup", "notebook")
AUDIT_KEYS = {"ts", "run_id", "actor", "mode", "phase", "provider", "account", "region",
              "resource", "kind", "policy", "action", "before", "request", "after", "result",
              "reason", "error", "rate"}

MARK_POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: untagged-gpu-marked
    title: GPU compute without a team is marked
    severity: low
    resources: [instance, autoscaling_group, node_group, notebook, training_job]
    parameters: {required_tags: [team]}
    scope: {has-gpu: true}
    violation: {tags-missing: {}}
    message: "{{ r.name }} has no team tag"
    enforcement: {plan: "off", admission: "off", runtime: deny}
    remediations: [mark-violation]
"""


def enforce(audit: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run_cli(["scan", "--source", "aws", "--region", EAST, "--region", WEST,
                              "--now", OFF_HOURS_NOW, "-f", "json", "--enforce",
                              "--audit-log", str(audit), *extra], capsys, monkeypatch)
    return code, (json.loads(out) if out else {}), err


def off_hours(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f["remediation"] for f in report["findings"]
            if f["policy"] == "gpu-off-hours-shutdown"}


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def instance_state(aws: AwsLab, instance_id: str, region: str = EAST) -> str:
    found = aws.client("ec2", region).describe_instances(InstanceIds=[instance_id])
    return str(found["Reservations"][0]["Instances"][0]["State"]["Name"])


def group_size(aws: AwsLab) -> tuple[int, int, int, dict[str, str]]:
    group = aws.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=["gpu-workers"])["AutoScalingGroups"][0]
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    return group["MinSize"], group["MaxSize"], group["DesiredCapacity"], tags


def node_group(aws: AwsLab) -> dict[str, Any]:
    return dict(aws.client("eks").describe_nodegroup(clusterName="ml",
                                                     nodegroupName="gpu")["nodegroup"])


def notebook_status(aws: AwsLab) -> str:
    return str(aws.client("sagemaker").describe_notebook_instance(
        NotebookInstanceName="research")["NotebookInstanceStatus"])


def changed_targets(aws: AwsLab, estate: Estate) -> set[str]:
    """Which of the off-hours targets are no longer running, read back from moto."""
    changed = {name for name in ("dev", "spot") if instance_state(aws, estate[name]) != "running"}
    if instance_state(aws, estate["west"], WEST) != "running":
        changed.add("west")
    if group_size(aws)[2] == 0:
        changed.add("asg")
    if node_group(aws)["scalingConfig"]["desiredSize"] == 0:
        changed.add("nodegroup")
    if notebook_status(aws) != "InService":
        changed.add("notebook")
    return changed


# ---------------------------------------------------------------------------- enforce


def test_enforce_stops_exactly_the_off_hours_targets(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = aws.record_calls()
    code, report, _ = enforce(tmp_path / "audit.jsonl", capsys, monkeypatch)
    assert code == 1 and report["mode"] == "enforce"
    assert changed_targets(aws, estate) == set(STOP_TARGETS)
    for untouched in ("prod", "exempt", "cpu"):
        assert instance_state(aws, estate[untouched]) == "running"
    assert instance_state(aws, estate["dev"]) == "stopped"

    assert group_size(aws)[:3] == (0, 4, 0)
    assert group_size(aws)[3][PREVIOUS_SIZE_TAG] == "1,4,2"
    nodes = node_group(aws)
    assert nodes["scalingConfig"] == {"minSize": 0, "maxSize": 3, "desiredSize": 0}
    assert nodes["tags"][PREVIOUS_SIZE_TAG] == "1,3,2"
    assert notebook_status(aws) in ("Stopping", "Stopped")

    snapshots = aws.client("ec2").describe_snapshots(
        Filters=[{"Name": "tag:gpuwarden:snapshot-of", "Values": [estate["dev"]]}])["Snapshots"]
    assert [s["VolumeId"] for s in snapshots] == [estate["dev-data"]]

    statuses = {rid: r["status"] for rid, r in off_hours(report).items()}
    assert statuses == {estate[name]: "applied" for name in STOP_TARGETS}
    mutated = [(c[2], c[3]) for c in aws.mutating_calls()]
    assert sorted(op for op, _ in mutated) == sorted([
        "CreateSnapshot", "StopInstances", "StopInstances", "StopInstances",
        "CreateTags", "CreateTags", "CreateTags",  # gpuwarden's stop marks, for resume
        "CreateOrUpdateTags", "UpdateAutoScalingGroup", "TagResource", "UpdateNodegroupConfig",
        "AddTags", "StopNotebookInstance"])
    stopped = {i for op, params in mutated if op == "StopInstances"
               for i in params["InstanceIds"]}
    assert stopped == {estate["dev"], estate["spot"], estate["west"]}
    assert calls.index(next(c for c in calls if c[2] == "CreateSnapshot")) < calls.index(
        next(c for c in calls if c[2] == "StopInstances" and c[3]["InstanceIds"]
             == [estate["dev"]]))


def test_audit_log_has_before_then_after_for_every_action(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    on_disk_before_call: list[bool] = []

    def before_line_first(client: Any) -> None:
        def check(model: Any, params: dict[str, Any], **_: Any) -> None:
            if model.name in ("StopInstances", "UpdateAutoScalingGroup",
                              "UpdateNodegroupConfig", "StopNotebookInstance"):
                last = audit_lines(audit)[-1]
                on_disk_before_call.append(last["phase"] == "before"
                                           and last["result"] is None)

        client.meta.events.register("provide-client-params", check)

    aws.hooks.append(before_line_first)
    enforce(audit, capsys, monkeypatch)
    assert on_disk_before_call == [True] * len(STOP_TARGETS)

    lines = audit_lines(audit)
    assert all(set(line) == AUDIT_KEYS for line in lines)
    assert len({line["run_id"] for line in lines}) == 1
    by_resource: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_resource.setdefault(line["resource"], []).append(line)
    assert set(by_resource) == {estate[name] for name in STOP_TARGETS}
    for entries in by_resource.values():
        assert [(e["phase"], e["result"]) for e in entries] == [("before", None),
                                                                ("after", "applied")]
    before, after = by_resource[estate["dev"]]
    assert before["before"] == {"state": "running", "instance_type": "p3.2xlarge"}
    assert before["request"]["StopInstances"] == {"InstanceIds": [estate["dev"]]}
    assert after["after"]["state"] == "stopping" and len(after["after"]["snapshots"]) == 1
    assert (after["provider"], after["region"], after["account"], after["mode"]) == \
        ("aws", EAST, "123456789012", "enforce")
    assert after["policy"] == "gpu-off-hours-shutdown" and after["action"] == "stop"
    assert after["actor"].startswith("gpuwarden/")
    assert datetime.fromisoformat(after["ts"]).tzinfo is not None
    group_before, group_after = by_resource[estate["asg"]]
    assert group_before["before"] == {"min": 1, "max": 4, "desired": 2}
    assert group_after["after"] == {"min": 0, "max": 4, "desired": 0}


def test_enforce_respects_max_actions(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws.record_calls()
    _, report, _ = enforce(tmp_path / "audit.jsonl", capsys, monkeypatch, "--max-actions", "1")
    statuses = off_hours(report)
    applied = [rid for rid, r in statuses.items() if r["status"] == "applied"]
    assert len(applied) == 1
    skipped = [r for r in statuses.values() if r["status"] == "skipped"]
    assert len(skipped) == len(STOP_TARGETS) - 1
    assert all(r["detail"] == "blast radius: --max-actions 1 reached" for r in skipped)
    assert len(changed_targets(aws, estate)) == 1
    assert {c[2] for c in aws.mutating_calls()} <= {"CreateSnapshot", "StopInstances",
                                                    "CreateOrUpdateTags",
                                                    "UpdateAutoScalingGroup", "TagResource",
                                                    "UpdateNodegroupConfig", "AddTags",
                                                    "StopNotebookInstance"}
    assert len(audit_lines(tmp_path / "audit.jsonl")) == 2


def test_max_actions_zero_changes_nothing(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = aws.record_calls()
    enforce(tmp_path / "audit.jsonl", capsys, monkeypatch, "--max-actions", "0")
    assert calls and not aws.mutating_calls()
    assert changed_targets(aws, estate) == set()


def test_enforce_is_idempotent(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    enforce(audit, capsys, monkeypatch)
    first = len(audit_lines(audit))
    calls = aws.record_calls()
    _, report, _ = enforce(audit, capsys, monkeypatch)
    assert calls and not aws.mutating_calls()
    assert not off_hours(report)  # everything is stopped or at zero now
    assert len(audit_lines(audit)) == first


def test_stale_scan_skips_what_is_already_stopped(aws: AwsLab, estate: Estate,
                                                  tmp_path: Path) -> None:
    collected = collect(None, ScanOptions(regions=(EAST,)), builtin_catalog())
    report = evaluate_and_plan(build_engine(None), collected.resources, OFF_HOURS)
    aws.client("ec2").stop_instances(InstanceIds=[estate["dev"]])
    aws.client("autoscaling").update_auto_scaling_group(
        AutoScalingGroupName="gpu-workers", MinSize=0, DesiredCapacity=0)
    aws.record_calls()
    audit = tmp_path / "audit.jsonl"
    done = apply_aws_remediations(report, collected.resources, collected.clients["aws"],
                                  max_actions=10, audit_log=audit,
                                  clock=lambda: datetime(2026, 12, 1, 3, tzinfo=UTC))
    remediations = {f.resource.id: f.remediation for f in done.findings
                    if f.policy == "gpu-off-hours-shutdown"}
    dev, group = remediations[estate["dev"]], remediations[estate["asg"]]
    assert dev is not None and (dev.status, dev.detail) == \
        ("skipped", f"{estate['dev']} is already stopped")
    assert group is not None and group.status == "skipped" and "already at zero" in group.detail
    assert not [c for c in aws.mutating_calls() if estate["dev"] in str(c[3])]
    checks = [line for line in audit_lines(audit) if line["resource"] == estate["dev"]]
    assert [(c["phase"], c["result"]) for c in checks] == [("check", "skipped")]
    assert checks[0]["ts"] == "2026-12-01T03:00:00+00:00"


def test_a_failure_is_recorded_and_the_run_goes_on(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from botocore.exceptions import ClientError

    def refuse_west(client: Any) -> None:
        def check(model: Any, params: dict[str, Any], **_: Any) -> None:
            if model.name == "StopInstances" and params["InstanceIds"] == [estate["west"]]:
                raise ClientError({"Error": {"Code": "UnsupportedOperation",
                                             "Message": "stopping this instance is not "
                                                        "supported"}}, model.name)

        client.meta.events.register("provide-client-params", check)

    aws.hooks.append(refuse_west)
    audit = tmp_path / "audit.jsonl"
    _, report, _ = enforce(audit, capsys, monkeypatch)
    statuses = off_hours(report)
    west = statuses[estate["west"]]
    assert west["status"] == "failed"
    assert west["detail"] == (f"stop {estate['west']} failed: UnsupportedOperation: "
                              "stopping this instance is not supported")
    assert {rid: r["status"] for rid, r in statuses.items() if rid != estate["west"]} == \
        {estate[name]: "applied" for name in STOP_TARGETS if name != "west"}
    assert instance_state(aws, estate["west"], WEST) == "running"
    entries = [line for line in audit_lines(audit) if line["resource"] == estate["west"]]
    assert [(e["phase"], e["result"]) for e in entries] == [("before", None),
                                                            ("after", "failed")]
    assert entries[1]["error"].startswith("UnsupportedOperation")


def test_unwritable_audit_log_changes_nothing(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aws.record_calls()
    code, _, err = enforce(tmp_path / "missing" / "audit.jsonl", capsys, monkeypatch)
    assert code == 2 and "cannot write audit log" in err and "Traceback" not in err
    assert not aws.mutating_calls()


# ---------------------------------------------------------------------------- mark-violation


def test_mark_violation_tags_once(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = tmp_path / "mark.yaml"
    policy.write_text(MARK_POLICY)
    audit = tmp_path / "audit.jsonl"
    today = datetime.now(UTC).date().isoformat()
    _, report, _ = enforce(audit, capsys, monkeypatch, "--policies", str(policy))
    marked = {f["resource"]["id"]: f["remediation"] for f in report["findings"]}
    assert set(marked) == {estate["spot"], estate["training"]}  # the only ones with no team
    assert all(r["status"] == "applied" for r in marked.values())
    ec2_tags = aws.client("ec2").describe_tags(Filters=[
        {"Name": "resource-id", "Values": [estate["spot"]]}])["Tags"]
    assert {t["Key"]: t["Value"] for t in ec2_tags}[VIOLATION_TAG] == \
        f"untagged-gpu-marked@{today}"
    job_tags = aws.client("sagemaker").list_tags(ResourceArn=estate["training"])["Tags"]
    assert {t["Key"]: t["Value"] for t in job_tags}[VIOLATION_TAG] == \
        f"untagged-gpu-marked@{today}"

    calls = aws.record_calls()
    _, again, _ = enforce(audit, capsys, monkeypatch, "--policies", str(policy))
    assert not aws.mutating_calls() and calls
    assert {f["remediation"]["status"] for f in again["findings"]} == {"skipped"}
    assert all("already marked" in f["remediation"]["detail"] for f in again["findings"])


def planned(policy: str, resource_id: str, kind: str, action: str) -> Finding:
    return Finding(policy=policy, severity=Severity.LOW, result="fail", message="m",
                   enforcement="deny",
                   resource=ResourceRef(provider="aws", kind=kind, id=resource_id,
                                        name=resource_id, region=EAST),
                   remediation=Remediation(action=action, detail="would act"))


def test_marks_of_several_policies_are_kept_and_unsupported_kinds_skipped(
    aws: AwsLab, estate: Estate, tmp_path: Path,
) -> None:
    collected = collect(None, ScanOptions(regions=(EAST,)), builtin_catalog())
    clients: AwsClients = collected.clients["aws"]
    findings = [
        planned("first", estate["asg"], "aws_autoscaling_group", "mark-violation"),
        planned("second", estate["asg"], "aws_autoscaling_group", "mark-violation"),
        planned("first", estate["nodegroup"], "aws_eks_node_group", "mark-violation"),
        planned("first", estate["scratch"], "aws_ebs_volume", "stop"),
        planned("first", estate["endpoint"], "aws_sagemaker_endpoint", "stop"),
    ]
    report = Report(generated_at=OFF_HOURS, findings=findings)
    done = apply_aws_remediations(report, collected.resources, clients, max_actions=10,
                                  audit_log=tmp_path / "a.jsonl",
                                  clock=lambda: datetime(2026, 12, 1, 3, tzinfo=UTC))
    results = [(f.remediation.status, f.remediation.detail) for f in done.findings
               if f.remediation is not None]
    assert [status for status, _ in results] == ["applied", "applied", "applied", "skipped",
                                                 "skipped"]
    assert results[3][1] == "no stop action for a aws_ebs_volume"
    assert group_size(aws)[3][VIOLATION_TAG] == "first@2026-12-01,second@2026-12-01"
    assert node_group(aws)["tags"][VIOLATION_TAG] == "first@2026-12-01"
    assert done.mode == "enforce"


def test_docs_list_every_permission_gpuwarden_uses(
    aws: AwsLab, estate: Estate, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = tmp_path / "mark.yaml"
    policy.write_text(MARK_POLICY)
    calls = aws.record_calls()
    enforce(tmp_path / "audit.jsonl", capsys, monkeypatch, "--policies", "builtin",
            "--policies", str(policy), "--max-actions", "50")
    used = {f"{service}:{operation}" for _, service, operation, _ in calls}
    assert {"ec2:StopInstances", "ec2:CreateTags", "sagemaker:AddTags",
            "eks:TagResource"} <= used
    documented = (REPO / "docs" / "aws.md").read_text()
    assert not [action for action in sorted(used) if f'"{action}"' not in documented
                and action != "sts:GetCallerIdentity"]
