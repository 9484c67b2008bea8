"""Enforcement never touches production: the one definition of production (engine.core.labels) fails
safe, the executors re-read tags just before acting, and a throttled API or a deadline cannot
make a run overstay. AWS parts run against moto in server mode (tests/conftest_aws.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.catalog import builtin_catalog
from engine.core.labels import (
    environment,
    exempt_ids,
    is_production,
    is_production_value,
    protection,
)
from engine.core.model import Category, Resource
from engine.pipeline import build_engine, evaluate_and_plan
from engine.sources.aws import collect
from engine.sources.registry import ScanOptions
from remediations.aws_actions import CALL_ATTEMPTS, apply_aws_remediations
from remediations.planning import plan_remediation
from remediations.runner import DEADLINE_REACHED, Deadline
from tests.conftest import OFF_HOURS
from tests.conftest_aws import (
    COST_TAGS,
    EAST,
    AwsLab,
    Estate,
    aws_fixture,  # noqa: F401
    estate_fixture,  # noqa: F401
    moto_endpoint_fixture,  # noqa: F401
    run_instance,
)
from tests.test_aws_enforce import audit_lines, enforce, instance_state, off_hours

# ---------------------------------------------------------------------------- the definition

PRODUCTION_TAGS: list[dict[str, str]] = [
    {"env": "prod"},
    {"env": " prod"},
    {"env": "prod-eu"},
    {"env": "prd"},
    {"env": "eu-prd"},
    {"Environment": "Production"},
    {" ENV ": "PROD\t"},
    {"env": "pr\u200bod"},  # a zero-width space inside
    {"env": "\uff50\uff52\uff4f\uff44"},  # fullwidth letters
    {"Stage": "production"},
    {"tier": "prod"},
    {"acme:env": "prod"},
    {"example.com/environment": "prod"},
    {"env": "dev", "Environment": "Production"},  # conflicting: the first key must not win
    {"environment": "staging", "env": "prod"},
    {"env": '"prod"'},
]
NON_PRODUCTION_TAGS: list[dict[str, str]] = [
    {},
    {"env": "dev"},
    {"env": "non-prod"},
    {"env": "nonprod"},
    {"env": "pre-prod"},
    {"env": "staging", "team": "prod"},
    {"name": "prod-db"},
]


@pytest.mark.parametrize("tags", PRODUCTION_TAGS, ids=[str(t) for t in PRODUCTION_TAGS])
def test_production_fails_safe(tags: dict[str, str]) -> None:
    verdict = environment(tags)
    assert verdict.production, verdict
    assert protection("gpu-off-hours-shutdown", tags) is not None


@pytest.mark.parametrize("tags", NON_PRODUCTION_TAGS, ids=[str(t) for t in NON_PRODUCTION_TAGS])
def test_non_production_stays_non_production(tags: dict[str, str]) -> None:
    assert not environment(tags).production
    assert protection("gpu-off-hours-shutdown", tags) is None


def test_conflicting_tags_say_so() -> None:
    verdict = environment({"env": "dev", "Environment": "Production"})
    assert verdict.production and "disagree" in verdict.reason
    assert "'env'='dev'" in verdict.reason and "'Environment'='Production'" in verdict.reason


def test_own_tags_decide_before_the_namespace() -> None:
    assert environment({}, {"env": "prod"}).production
    assert not environment({"env": "dev"}, {"env": "prod"}).production
    assert environment({"env": "dev", "stage": "prod"}, {"env": "dev"}).production


def test_exemption_keys_and_ids_are_normalized() -> None:
    assert exempt_ids({" GPUWarden_Exempt": "GPU-Off-Hours-Shutdown, gpu-idle"}) == {
        "gpu-off-hours-shutdown", "gpu-idle"}
    assert protection("gpu-idle", {"gpuwarden.io/exempt": "all"}) is not None
    assert protection("gpu-idle", {"gpuwarden-exempt": "gpu-spot-required"}) is None


def test_values_are_bounded_in_the_reason() -> None:
    verdict = environment({"env": "prod" + "x" * 10_000})
    assert verdict.production and len(verdict.reason) < 200


@pytest.mark.parametrize("value", ["production", "PRD-1", "prod_eu", "us-east-prod"])
def test_production_values(value: str) -> None:
    assert is_production_value(value)



_LABEL_KEYS = st.sampled_from(["env", "Environment", "STAGE", "tier", "team", "k8s:stage",
                               "app.kubernetes.io/env", " env ", "env_", "owner"])
_LABEL_VALUES = st.sampled_from(["prod", "Production", "dev", "non-prod", "pre-prod", "prd-eu",
                                 "staging", "", " ", "prod\u200b", "\uff30\uff32\uff2f\uff24",
                                 "qa"]) | st.text(max_size=12)
_LABELS = st.dictionaries(_LABEL_KEYS, _LABEL_VALUES, max_size=4)


@settings(max_examples=300, deadline=None)
@given(tags=_LABELS, namespace_labels=_LABELS)
def test_the_policies_answer_is_the_reasoned_one(tags: dict[str, str],
                                                 namespace_labels: dict[str, str]) -> None:
    """Policies ask `is_production`, which skips building the words; its answer is always the
    one `environment` gives with its reason (what enforcement and messages show)."""
    resource = Resource(provider="aws", category=Category.INSTANCE, kind="aws_instance",
                        id="i-1", name="i-1", tags=tags, namespace_labels=namespace_labels)
    assert is_production(resource) is environment(tags, namespace_labels).production


def test_policies_and_enforcement_share_the_definition(make_resource: Any) -> None:
    """A policy scoped to non-production skips it; the planner refuses it and says why."""
    resource = make_resource(instance_type="p3.2xlarge", capacity="on-demand",
                             tags={**COST_TAGS, "env": "dev", "Environment": "Production"})
    findings = evaluate_and_plan(build_engine(None), [resource], OFF_HOURS,
                                 door="runtime").findings
    assert not [f for f in findings if f.policy in ("gpu-off-hours-shutdown",
                                                    "gpu-spot-required")]
    planned = plan_remediation(["stop"], resource, {}, enforcement="deny", door="runtime",
                               production=is_production(resource))
    assert planned is not None and planned.status == "skipped"
    assert "never changed" in planned.detail and "disagree" in planned.detail


# ---------------------------------------------------------------------------- AWS, end to end

RISKY_TAGS: dict[str, dict[str, str]] = {
    "conflicting": {"env": "dev", "Environment": "Production"},
    "padded": {"env": " prod"},
    "regional": {"env": "prod-eu"},
    "short": {"env": "prd"},
    "stage": {"Stage": "Production"},
}


def test_scan_enforce_stops_none_of_the_production_lookalikes(
    aws: AwsLab, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ec2 = aws.client("ec2")
    ids = {name: run_instance(ec2, "g5.xlarge", {**COST_TAGS, **tags})
           for name, tags in RISKY_TAGS.items()}
    dev = run_instance(ec2, "g5.xlarge", {**COST_TAGS, "env": "dev"})
    aws.record_calls()

    _, report, _ = enforce(tmp_path / "audit.jsonl", capsys, monkeypatch)

    assert {name: instance_state(aws, i) for name, i in ids.items()} == {
        name: "running" for name in RISKY_TAGS}
    assert instance_state(aws, dev) == "stopped"
    stopped = {i for _, _, op, params in aws.mutating_calls() if op == "StopInstances"
               for i in params["InstanceIds"]}
    assert stopped == {dev}
    assert set(off_hours(report)) == {dev}  # production is out of the policy's scope


def _stale_report(aws: AwsLab) -> tuple[Any, Any]:
    collected = collect(None, ScanOptions(regions=(EAST,)), builtin_catalog())
    return collected, evaluate_and_plan(build_engine(None), collected.resources, OFF_HOURS)


def test_tags_are_read_again_just_before_acting(aws: AwsLab, estate: Estate,
                                                tmp_path: Path) -> None:
    collected, report = _stale_report(aws)
    # Since the scan: the dev instance became production, the spot one exempt, the
    # autoscaling group production by a tag that does not propagate, the node group prd.
    aws.client("ec2").create_tags(Resources=[estate["dev"]], Tags=[
        {"Key": "Environment", "Value": "Production"}])
    aws.client("ec2").create_tags(Resources=[estate["spot"]], Tags=[
        {"Key": "gpuwarden-exempt", "Value": "gpu-off-hours-shutdown"}])
    aws.client("autoscaling").create_or_update_tags(Tags=[{
        "ResourceId": "gpu-workers", "ResourceType": "auto-scaling-group", "Key": "stage",
        "Value": "prod", "PropagateAtLaunch": False}])
    aws.client("eks").tag_resource(resourceArn=estate["nodegroup"], tags={"env": "prd"})
    aws.record_calls()
    audit = tmp_path / "audit.jsonl"

    done = apply_aws_remediations(report, collected.resources, collected.clients["aws"],
                                  max_actions=10, audit_log=audit,
                                  clock=lambda: datetime(2026, 12, 1, 3, tzinfo=UTC))

    results = {f.resource.id: f.remediation for f in done.findings
               if f.policy == "gpu-off-hours-shutdown" and f.remediation is not None}
    protected = {estate[name] for name in ("dev", "spot", "asg", "nodegroup")}
    for resource_id in protected:
        result = results[resource_id]
        assert result.status == "skipped", result
        assert "tags re-read before acting" in result.detail
    assert "production" in results[estate["dev"]].detail
    assert "exempt" in results[estate["spot"]].detail
    assert results[estate["notebook"]].status == "applied"
    touched = " ".join(str(call[3]) for call in aws.mutating_calls())
    assert not [rid for rid in (estate["dev"], estate["spot"], "gpu-workers")
                if rid in touched]
    assert "UpdateNodegroupConfig" not in {call[2] for call in aws.mutating_calls()}
    for resource_id in protected:
        [line] = [e for e in audit_lines(audit) if e["resource"] == resource_id]
        assert (line["phase"], line["result"]) == ("check", "skipped")
        assert "tags re-read before acting" in line["reason"]
    assert instance_state(aws, estate["dev"]) == "running"


# ---------------------------------------------------------------------------- throttling, deadline

THROTTLED = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
             b"<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
             b"</Error></Errors><RequestID>throttled</RequestID></Response>")


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Any:
        yield self.data


def throttle_stops(aws: AwsLab, sends: list[str], on_send: Any = None) -> None:
    """Every StopInstances answered 400 RequestLimitExceeded before it reaches moto."""
    from botocore.awsrequest import AWSResponse

    def hook(client: Any) -> None:
        def throttled(request: Any, **_: Any) -> AWSResponse:
            sends.append(request.url)
            if on_send is not None:
                on_send()
            return AWSResponse(request.url, 400, {}, _Body(THROTTLED))

        client.meta.events.register("before-send.ec2.StopInstances", throttled)

    aws.hooks.append(hook)


def test_a_throttled_stop_is_tried_a_few_times_then_fails(aws: AwsLab, estate: Estate,
                                                         tmp_path: Path) -> None:
    collected, report = _stale_report(aws)
    sends: list[str] = []
    throttle_stops(aws, sends)
    started = time.monotonic()

    done = apply_aws_remediations(report, collected.resources, collected.clients["aws"],
                                  max_actions=10, audit_log=tmp_path / "a.jsonl")

    elapsed = time.monotonic() - started
    instances = {estate["dev"], estate["spot"]}  # the instances to stop in us-east-1
    results = {f.resource.id: f.remediation for f in done.findings
               if f.policy == "gpu-off-hours-shutdown" and f.remediation is not None}
    assert len(sends) == CALL_ATTEMPTS * len(instances) == 6
    for instance in instances:
        assert results[instance].status == "failed"
        assert "RequestLimitExceeded" in results[instance].detail
    assert results[estate["asg"]].status == "applied"  # the run went on
    assert elapsed < 30, elapsed  # the scan's adaptive retries took about 80 s per stop


def test_actions_past_the_deadline_are_skipped_and_audited(aws: AwsLab, estate: Estate,
                                                           tmp_path: Path) -> None:
    collected, report = _stale_report(aws)
    now = [0.0]
    sends: list[str] = []

    def late() -> None:  # the first stop attempt takes the run past its deadline
        now[0] = 100.0

    throttle_stops(aws, sends, on_send=late)
    audit = tmp_path / "a.jsonl"

    done = apply_aws_remediations(report, collected.resources, collected.clients["aws"],
                                  max_actions=10, audit_log=audit,
                                  deadline=Deadline(10.0, clock=lambda: now[0]))

    results = [(f.resource.id, f.remediation) for f in done.findings
               if f.policy == "gpu-off-hours-shutdown" and f.remediation is not None]
    statuses = [r.status for _, r in results]
    first_late = next(i for i, (_, r) in enumerate(results) if r.status == "failed")
    assert len(sends) == CALL_ATTEMPTS
    assert all(status == "applied" for status in statuses[:first_late])
    assert all(r.status == "skipped" and r.detail == DEADLINE_REACHED
               for _, r in results[first_late + 1:])
    assert len(results) - first_late - 1 >= 1
    lines = audit_lines(audit)
    late_ids = [rid for rid, _ in results[first_late + 1:]]
    for resource_id in late_ids:
        [line] = [e for e in lines if e["resource"] == resource_id]
        assert (line["phase"], line["result"], line["reason"]) == (
            "check", "skipped", DEADLINE_REACHED)
    attempted = [rid for rid, _ in results[:first_late + 1]]
    for resource_id in attempted:
        assert [e["phase"] for e in lines if e["resource"] == resource_id] == ["before", "after"]
