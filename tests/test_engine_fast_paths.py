"""The engine's shortcuts give what the long way gives: findings built without validation, a
resource's spend remembered within one evaluation, message attributes read without jinja2's
checks where the type says what they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from jinja2.runtime import Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.core import costs
from engine.core.catalog import builtin_catalog
from engine.core.costs import remembered_spend, resource_spend
from engine.core.evaluate import Engine
from engine.core.model import (
    Capacity,
    Finding,
    GpuSpec,
    Resource,
    ResourceRef,
    Severity,
    SourceLocation,
    trusted,
)
from engine.core.templates import ENVIRONMENT, compile_message
from tests.conftest import OFF_HOURS, pure_python_only

Make = Callable[..., Resource]


def _finding_fields(ref: ResourceRef) -> dict[str, Any]:
    return {
        "policy": "gpu-idle", "title": "Idle GPUs", "severity": Severity.HIGH,
        "result": "fail", "resource": ref, "message": "trainer idles",
        "enforcement": "warn", "estimated_monthly_usd": 12.5, "cost_kind": "savings",
        "cost_basis": "basis", "remediation": None,
        "location": SourceLocation(file="main.tf", line=3), "details": {"unknown": ["a"]},
    }


def test_a_trusted_finding_is_the_validated_one() -> None:
    ref_fields = {"provider": "aws", "kind": "aws_instance", "id": "i-1", "name": "trainer",
                  "region": "us-east-1", "namespace": None}
    ref_fields |= {name: None for name in ResourceRef.model_fields if name not in ref_fields}
    ref = trusted(ResourceRef, **ref_fields)
    assert ref == ResourceRef(**ref_fields)
    fast = trusted(Finding, **_finding_fields(ref))
    slow = Finding(**_finding_fields(ResourceRef(**ref_fields)))
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.model_copy(update={"message": "x"}).message == "x"
    fast.message = "assigned"  # pydantic adds the name to the (shared) set: it is there already
    other = trusted(Finding, **_finding_fields(ref))
    assert other.model_fields_set == slow.model_fields_set == set(Finding.model_fields)


def test_findings_of_one_resource_name_it_alike(builtin_engine: Engine, make_resource: Make
                                                ) -> None:
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand", region="us-east-1")
    findings = builtin_engine.evaluate([box], OFF_HOURS).findings
    assert len(findings) >= 2
    assert all(f.resource == ResourceRef.of(box) for f in findings)


@pure_python_only
def test_spend_is_remembered_for_the_same_object_only(make_resource: Make,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = builtin_catalog()
    calls: list[str] = []
    spend_of = costs._spend_of

    def counted(resource: Resource, catalog_: Any) -> costs.Spend:
        calls.append(resource.id)
        return spend_of(resource, catalog_)

    monkeypatch.setattr(costs, "_spend_of", counted)
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand", region="us-east-1")
    with remembered_spend():
        first = resource_spend(box, catalog)
        assert resource_spend(box, catalog) is first
        assert len(calls) == 1
        # a changed copy is another object: priced afresh, never the stale figure
        spot = box.model_copy(update={"capacity": Capacity.SPOT})
        assert resource_spend(spot, catalog).monthly_usd != first.monthly_usd
        assert len(calls) == 2
    resource_spend(box, catalog)
    resource_spend(box, catalog)
    assert len(calls) == 4  # outside an evaluation nothing is remembered


def _resource() -> Resource:
    return Resource(provider="aws", kind="aws_instance", category="instance", id="i-1",
                    name="trainer", gpu=GpuSpec(model="T4", count=1), capacity=Capacity.SPOT,
                    tags={"team": "ml"})


@pytest.mark.parametrize(("obj", "attribute"), [
    (_resource(), "name"), (_resource(), "gpu"), (_resource(), "tags"),
    (_resource(), "model_copy"), (_resource(), "model_dump"), (_resource(), "has_gpu"),
    (_resource(), "mro"), (Capacity.SPOT, "value"), (Capacity.SPOT, "name"),
    (Capacity.SPOT, "upper"), ({"sibling": "g5"}, "sibling"), ({"sibling": "g5"}, "missing"),
    ({"items": 1}, "items"), ({"pop": 1}, "pop"), ({"a": 1}, "clear"), ("text", "format"),
    (None, "count"), ([1, 2], "append"),
])
def test_attributes_read_as_jinja2s_sandbox_reads_them(obj: Any, attribute: str) -> None:
    reference = ImmutableSandboxedEnvironment().getattr(obj, attribute)
    for _ in range(2):  # the first read classifies the attribute, the second uses it
        value = ENVIRONMENT.getattr(obj, attribute)
        if isinstance(reference, Undefined):
            assert isinstance(value, Undefined)
        elif callable(reference):
            assert type(value) is type(reference)
        else:
            assert value == reference


def test_only_templates_with_loops_or_calls_carry_a_render_budget() -> None:
    assert not compile_message("{{ r.name }} costs {{ cost | usd }}").budgeted
    assert compile_message("{% for t in details.tags %}{{ t }}{% endfor %}").budgeted
    assert compile_message("{{ details.get('a') }}").budgeted
    looping = compile_message("{% for i in range(999) %}{% for j in range(999) %}"
                              "{% endfor %}{% endfor %}")
    assert "message template failed" in looping.render({}, fallback="t")


@pure_python_only
def test_spot_discounts_are_remembered_by_what_they_are_computed_from(make_resource: Make
                                                                      ) -> None:
    catalog = builtin_catalog()
    box = make_resource(instance_type="p3.2xlarge", capacity="on-demand", region="us-east-1")
    twin = make_resource(id="i-twin", instance_type="p3.2xlarge", capacity="on-demand",
                         region="us-east-1")
    live = box.model_copy(update={"spot_hourly_usd": 0.5})
    elsewhere = box.model_copy(update={"region": "eu-west-1"})
    outside = [costs.spot_discount(r, catalog) for r in (box, live, elsewhere)]
    with remembered_spend():
        first = costs.spot_discount(box, catalog)
        assert costs.spot_discount(twin, catalog) is first
        inside = [costs.spot_discount(r, catalog) for r in (box, live, elsewhere)]
    assert inside == outside
    assert inside[0] != inside[1]  # a live spot price is its own key


def test_unknown_messages_give_each_resource_its_own_name_and_reasons(
        builtin_engine: Engine, make_resource: Make) -> None:
    def telemetry_unknown(name: str, schedule: str) -> Resource:
        return make_resource(id=f"i-{name}", name=name, instance_type="p3.2xlarge",
                             capacity="spot", tags={"gpuwarden-offhours": schedule})

    boxes = [telemetry_unknown("a", "off=(M-F,19);on=(M-F,7)"), telemetry_unknown("b", "bad"),
             telemetry_unknown("c", "worse"), telemetry_unknown("d", "off=(M-F,19);on=(M-F,7)")]
    messages = {f.resource.name: f.message for f in builtin_engine.evaluate(boxes, OFF_HOURS)
                .findings if f.policy == "gpu-off-hours-shutdown" and f.result == "unknown"}
    assert set(messages) == {"b", "c"}
    assert messages["b"].startswith("b: cannot decide") and "'bad'" in messages["b"]
    assert messages["c"].startswith("c: cannot decide") and "'worse'" in messages["c"]


def test_the_summary_counts_as_a_recount_does(builtin_engine: Engine, make_resource: Make
                                              ) -> None:
    from collections import Counter

    boxes = [make_resource(id=f"i-{n}", name=f"b{n}", instance_type=kind, capacity=capacity,
                           tags=tags)
             for n, (kind, capacity, tags) in enumerate([
                 ("p3.2xlarge", "on-demand", {}), ("g5.xlarge", "spot", {"team": "ml"}),
                 ("p4d.24xlarge", "on-demand", {"env": "prod"}), ("m5.large", "on-demand", {}),
                 ("g4dn.xlarge", "on-demand", {"gpuwarden-offhours": "nonsense"})])]
    report = builtin_engine.evaluate(boxes, OFF_HOURS)
    failing = [f for f in report.findings if f.result != "pass"]
    summary = report.summary
    assert summary.findings == len(failing) > 3
    assert summary.failed == sum(f.result == "fail" for f in failing)
    assert summary.unknown == sum(f.result == "unknown" for f in failing) > 0
    assert list(summary.by_policy.items()) == list(Counter(f.policy for f in failing).items())
    assert list(summary.by_severity.items()) == list(
        Counter(f.severity.value for f in failing).items())
