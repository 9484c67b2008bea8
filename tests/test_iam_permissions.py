"""The IAM policy of terraform/modules/scheduled-enforcement, derived from the code.

The code declares the IAM actions it calls next to the calls: each AWS inventory section
(`engine.sources.aws.inventory.SECTIONS`), the discovery of accounts and regions
(`engine.sources.aws.discovery.IAM`) and the enforcement executor (`remediations.aws_actions.IAM`).
Here the module's policy, parsed with python-hcl2, must grant exactly those: the read-only ones
always, the mutating ones only behind `var.enforce`, each for the remediation that needs it and
with the tag keys it writes. Then the declarations are held to the code: a scan (ambient
credentials and an assumed role) and an enforcement of every remediation run against moto, a
botocore event handler on every session records each API call as the IAM actions it needs, and
what was called must be exactly what is declared.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.model import Finding, Remediation, Report, Resource, ResourceRef, Severity
from engine.sources.aws import discovery, inventory
from engine.sources.aws import instance_types as aws_instance_types
from engine.sources.aws.permissions import IamGrant
from engine.sources.aws.scan import collect
from engine.sources.registry import Collected, ScanOptions
from remediations import aws_actions
from tests.conftest import OFF_HOURS
from tests.conftest_aws import (
    ACCOUNT,
    EAST,
    IMAGE,
    OTHER_ACCOUNT,
    ROLE,
    WEST,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
)
from tests.test_scheduled_enforcement_tf import MODULE, blocks_of, local, parse_dir

# Actions that write tags: IAM limits the keys they write with aws:TagKeys.
TAGGING = frozenset({"ec2:CreateTags", "autoscaling:CreateOrUpdateTags", "eks:TagResource",
                     "sagemaker:AddTags"})
NOW = datetime(2026, 12, 1, 3, tzinfo=UTC)
STOPPABLE = frozenset({"aws_instance", "aws_autoscaling_group", "aws_eks_node_group",
                       "aws_sagemaker_notebook_instance"})


# ---------------------------------------------------------------------------- what the code says


def declared_grants() -> list[IamGrant]:
    return [*discovery.IAM.grants, *aws_actions.IAM.grants]


def declared_reads() -> frozenset[str]:
    return inventory.read_actions() | discovery.IAM.reads() | aws_actions.IAM.reads()


def declared_writes() -> dict[str, frozenset[str]]:
    """Mutating actions by the remediation that needs them."""
    found: dict[str, set[str]] = {}
    for grant in aws_actions.IAM.writes():
        assert grant.remediation is not None
        found.setdefault(grant.remediation, set()).update(grant.writes)
    return {name: frozenset(actions) for name, actions in found.items()}


def declared_tag_keys() -> dict[tuple[str, str], frozenset[str]]:
    """Tag keys written, by (remediation, tagging action)."""
    found: dict[tuple[str, str], set[str]] = {}
    for grant in aws_actions.IAM.writes():
        for action in grant.writes & TAGGING:
            found.setdefault((str(grant.remediation), action), set()).update(grant.tag_keys)
    return {key: frozenset(keys) for key, keys in found.items()}


def declared_everything() -> frozenset[str]:
    writes = frozenset(a for actions in declared_writes().values() for a in actions)
    return (declared_reads() | writes | discovery.IAM.assumes() | discovery.IAM.ungated()
            | aws_actions.IAM.ungated())


# ------------------------------------------------------------------------- what the module grants


@pytest.fixture(scope="module", name="module")
def module_fixture() -> dict[str, list[Any]]:
    return parse_dir(MODULE)


def mutating_statements(module: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return list(local(module, "mutating_statements"))


def test_the_code_declares_something_of_every_kind() -> None:
    assert len(inventory.SECTIONS) >= 10
    assert all(entry.reads for entry in inventory.SECTIONS)
    assert declared_writes().keys() == {"stop", "snapshot-before-stop", "mark-violation"}
    assert discovery.IAM.assumes() == {"sts:AssumeRole"}
    assert not declared_reads() & frozenset(a for w in declared_writes().values() for a in w)


def test_read_only_actions_are_exactly_those_the_code_reads_with(module: dict[str, Any]
                                                                  ) -> None:
    granted = local(module, "read_only_actions")
    assert len(granted) == len(set(granted))
    assert set(granted) == declared_reads(), (
        f"granted, never called: {sorted(set(granted) - declared_reads())}; "
        f"called, not granted: {sorted(declared_reads() - set(granted))}")


def test_read_only_actions_are_granted_whatever_var_enforce(module: dict[str, Any]) -> None:
    scan = blocks_of(module, "data", "aws_iam_policy_document")["scan"]
    (statement,) = scan["statement"]
    assert statement["actions"] == "${local.read_only_actions}"
    assert statement["effect"] == "Allow" and statement["resources"] == ["*"]
    assert "condition" not in statement and "dynamic" not in statement


def test_mutating_actions_are_exactly_those_the_executor_calls(module: dict[str, Any]) -> None:
    granted: dict[str, set[str]] = {}
    for statement in mutating_statements(module):
        granted.setdefault(statement["remediation"], set()).update(statement["actions"])
    assert {name: frozenset(actions) for name, actions in granted.items()} == declared_writes()


def test_mutating_actions_are_granted_only_behind_var_enforce(module: dict[str, Any]) -> None:
    guard = local(module, "enabled_mutating_statements")
    assert guard.startswith("${var.enforce ? [for ") and guard.endswith("] : []}"), guard
    assert "in local.mutating_statements" in guard
    assert "contains(var.remediation_actions, " in guard
    scan = blocks_of(module, "data", "aws_iam_policy_document")["scan"]
    (dynamic,) = [d["statement"] for d in scan["dynamic"] if "statement" in d]
    assert dynamic["for_each"] == "${local.enabled_mutating_statements}"
    assert dynamic["content"][0]["actions"] == "${statement.value.actions}"
    writes = {a for actions in declared_writes().values() for a in actions}
    assert not writes & set(local(module, "read_only_actions"))


def test_tag_writes_are_limited_to_the_keys_the_executor_writes(module: dict[str, Any]) -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for statement in mutating_statements(module):
        for action in set(statement["actions"]) & TAGGING:
            granted.setdefault((statement["remediation"], action), set()).update(
                statement["tag_keys"])
    assert {key: frozenset(keys) for key, keys in granted.items()} == declared_tag_keys()


def test_roles_are_assumed_only_by_the_function_on_the_listed_roles(module: dict[str, Any]
                                                                      ) -> None:
    documents = blocks_of(module, "data", "aws_iam_policy_document")
    function = documents["function"]
    assumes = [d["statement"]["content"][0]["actions"] for d in function["dynamic"]
               if "statement" in d and d["statement"]["content"][0].get("sid")
               == "AssumeMemberRoles"]
    assert assumes == [sorted(discovery.IAM.assumes())]
    everything = {a for s in mutating_statements(module) for a in s["actions"]}
    assert not (discovery.IAM.assumes() | discovery.IAM.ungated()) & (
        everything | set(local(module, "read_only_actions")))


# ---------------------------------------------------------------------------- what the code calls


def iam_actions_of(service: str, operation: str, params: dict[str, Any]) -> set[str]:
    """The IAM actions one API call needs: `service:Operation`, and ec2:CreateTags for tags
    given at creation (TagSpecifications)."""
    actions = {f"{service}:{operation}"}
    if service == "ec2" and params.get("TagSpecifications"):
        actions.add("ec2:CreateTags")
    return actions


class Recorder:
    """IAM actions of every API call made through any botocore session created while it is
    installed, counted only while `on` (not while the test seeds moto)."""

    def __init__(self) -> None:
        self.actions: set[str] = set()
        self.on = False

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if self.on:
            self.actions |= iam_actions_of(model.service_model.signing_name, model.name,
                                           params)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from botocore.session import Session

        original: Callable[..., None] = Session.__init__
        recorder = self

        def init(session: Any, *args: Any, **kwargs: Any) -> None:
            original(session, *args, **kwargs)
            session.register("provide-client-params", recorder.record)

        monkeypatch.setattr(Session, "__init__", init)


@pytest.fixture(name="recorder")
def recorder_fixture(aws: AwsLab, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Installed after `aws` (and `estate`, when a test asks for it first): seeding is not
    recorded."""
    recorder = Recorder()
    recorder.install(monkeypatch)
    return recorder


def seed_launch_configuration_group(aws: AwsLab) -> None:
    """A group on a (legacy) launch configuration, so that the scan reads those too."""
    autoscaling = aws.client("autoscaling")
    autoscaling.create_launch_configuration(LaunchConfigurationName="legacy", ImageId=IMAGE,
                                            InstanceType="g4dn.xlarge")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="legacy", LaunchConfigurationName="legacy", MinSize=0,
        MaxSize=1, DesiredCapacity=0, AvailabilityZones=[f"{EAST}a"])


def planned(resource: Resource, action: str) -> Finding:
    return Finding(policy="iam-check", severity=Severity.LOW, result="fail", message="m",
                   enforcement="deny",
                   resource=ResourceRef(provider="aws", kind=resource.kind, id=resource.id,
                                        name=resource.name, region=resource.region),
                   remediation=Remediation(action=action, detail=f"would {action}"))


def enforce(collected: Collected, findings: list[Finding], audit: Path) -> Report:
    report = Report(generated_at=OFF_HOURS, findings=findings)
    return aws_actions.apply_aws_remediations(report, collected.resources,
                                              collected.clients["aws"], max_actions=50,
                                              audit_log=audit, clock=lambda: NOW)


def stop_everything(collected: Collected, audit: Path) -> Report:
    """stop on every resource of a kind that has a stop action (production ones are skipped
    after their fresh read)."""
    return enforce(collected, [planned(r, "stop") for r in collected.resources
                               if r.kind in STOPPABLE], audit)


def mark_every_kind(collected: Collected, audit: Path) -> Report:
    """mark-violation on one resource of every kind the scan found."""
    first_of_kind = {r.kind: r for r in reversed(collected.resources)}
    return enforce(collected, [planned(r, "mark-violation") for _, r in
                               sorted(first_of_kind.items())], audit)


def test_every_call_of_a_scan_and_an_enforcement_is_declared_and_every_declaration_called(
    aws: AwsLab, estate: Estate, recorder: Recorder, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_launch_configuration_group(aws)
    catalog = builtin_catalog()
    # A type newer than the built-in catalog makes the scan ask EC2 (DescribeInstanceTypes).
    monkeypatch.setattr(aws_instance_types, "_remembered", {})
    monkeypatch.setattr(aws_instance_types, "catalog_knows", lambda name: name != "g5.xlarge")
    recorder.on = True
    assumed = collect(None, ScanOptions(regions=(EAST,),
                                        role_arns=(ROLE.format(account=OTHER_ACCOUNT),)),
                      catalog)
    collected = collect(None, ScanOptions(regions=(EAST, WEST)), catalog)
    stopped = stop_everything(collected, tmp_path / "stop.jsonl")
    marked = mark_every_kind(collected, tmp_path / "mark.jsonl")
    enforce(collected, [planned(r, "resume") for r in collected.resources  # by its marks
                        if r.kind in ("aws_instance", "aws_autoscaling_group",
                                      "aws_eks_node_group",
                                      "aws_sagemaker_notebook_instance")],
            tmp_path / "resume.jsonl")
    recorder.on = False

    assert [a.account_id for a in assumed.clients["aws"].accounts] == [OTHER_ACCOUNT]
    assert {r.account for r in collected.resources} == {ACCOUNT}
    applied = {(f.resource.kind, f.remediation.action) for f in [*stopped.findings,
                                                                 *marked.findings]
               if f.remediation is not None and f.remediation.status == "applied"}
    assert {kind for kind, action in applied if action == "stop"} == STOPPABLE
    assert len({kind for kind, action in applied if action == "mark-violation"}) >= 6
    declared = declared_everything()
    undeclared, uncalled = recorder.actions - declared, declared - recorder.actions
    assert not undeclared, f"called, not declared: {sorted(undeclared)}"
    assert not uncalled, f"declared, never called: {sorted(uncalled)}"


def test_the_recorder_sees_an_undeclared_call(aws: AwsLab, recorder: Recorder) -> None:
    """The check above can fail: a call no declaration covers shows up in the record."""
    import boto3

    recorder.on = True
    boto3.Session().client("ec2", region_name=EAST).describe_snapshots(OwnerIds=["self"])
    recorder.on = False
    assert "ec2:DescribeSnapshots" in recorder.actions - declared_everything()
