"""The engine's loop applies each policy as worked out once per category, door and GPU state
(policies off at the door left out, GPU-scoped ones skipped for resources without GPUs, the
`has-gpu` test skipped for those with them, the scope's evidence skipped for failing findings
where it can only speak of unknowns): it must judge exactly what the plain loop judges, the one
that asks `Engine.verdict` of every policy and builds every finding with all its evidence."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, get_args

import pytest

from engine.core import labels
from engine.core.aggregates.collect import Aggregation
from engine.core.catalog import builtin_catalog
from engine.core.checks.has_gpu import gpu_state
from engine.core.conditions import EvalContext, ValueCondition, compile_condition
from engine.core.evaluate import SPEND_DETAIL, Engine, combined_savings, door_of, summarize
from engine.core.labels import exempt_ids, exempt_policies
from engine.core.model import Door, Finding, GpuSpec, Resource, ResourceRef
from engine.core.template_memo import MAX_ITEMS, plain_key
from engine.loading.policies import load_policies
from tests.conftest import BUSINESS_HOURS, OFF_HOURS

Make = Callable[..., Resource]


def _plain_loop(engine: Engine, resources: Iterable[Resource], ctx: EvalContext,
                door: Door | None) -> tuple[set[tuple[Any, ...]], int, int]:
    """Findings (without remediation), passes and exemptions, the long way."""
    findings: set[tuple[Any, ...]] = set()
    passed = exempted = 0
    for resource in resources:
        at = door or door_of(resource)
        ids = exempt_policies(resource)
        for policy in engine.policies:
            if resource.category not in policy.categories or policy.doors[at] == "off":
                continue
            if policy.id in ids or "all" in ids \
                    or any(pattern.match(resource.id) for pattern in policy.exempt):
                exempted += 1
                continue
            verdict = engine.verdict(policy, resource, ctx)
            passed += verdict == "pass"
            if verdict in ("fail", "unknown"):
                finding = engine.finding(policy, resource, ctx, verdict, at)
                findings.add(_row(finding.model_dump(mode="json")))
    return findings, passed, exempted


def _row(finding: dict[str, Any]) -> tuple[Any, ...]:
    return (finding["policy"], finding["resource"]["id"], finding["result"], finding["message"],
            repr(sorted(finding["details"].items())), finding["cost_basis"],
            finding["estimated_monthly_usd"], finding["severity"], finding["enforcement"])


def _estate(make: Make) -> list[Resource]:
    """GPUs, none, and not known yet; exempt by tag or not; production or not; planned too."""
    tag_sets: list[dict[str, str]] = [
        {}, {"env": "prod"}, {"team": "ml", "project": "p", "cost-center": "1"},
        {"gpuwarden-exempt": "gpu-spot-required,encryption-at-rest"}, {"gpuwarden-exempt": "all"},
    ]
    shapes: list[dict[str, Any]] = [
        {"instance_type": "p3.2xlarge", "capacity": "on-demand"},
        {"instance_type": "g5.xlarge", "capacity": "spot"},
        {"instance_type": "m5.xlarge", "capacity": "on-demand"},
        {"instance_type": "p3.2xlarge", "capacity": "on-demand", "state": "planned"},
        {"instance_type": None, "unknown": frozenset({"gpu", "instance_type"}),
         "state": "planned"},
        {"kind": "aws_ebs_volume", "category": "volume", "encrypted": False},
        {"provider": "kubernetes", "kind": "Deployment", "category": "workload",
         "gpu": GpuSpec(count=1, model="NVIDIA-A100-SXM4-40GB"), "capacity": "on-demand"},
        {"provider": "kubernetes", "kind": "Deployment", "category": "workload"},
    ]
    return [make(id=f"r-{i}-{j}", name=f"r{i}{j}", tags=tags, **shape)
            for i, shape in enumerate(shapes) for j, tags in enumerate(tag_sets)]


@pytest.fixture(scope="module")
def engine() -> Engine:
    """The built-in pack less its aggregate policies (groups are judged after the loop)."""
    return Engine([p for p in load_policies(["builtin"]) if not p.spec.aggregate])


@pytest.mark.parametrize("door", [None, *get_args(Door)])
@pytest.mark.parametrize("now", [OFF_HOURS, BUSINESS_HOURS])
def test_the_loop_judges_what_the_plain_loop_judges(engine: Engine, make_resource: Make,
                                                    door: Door | None, now: Any) -> None:
    estate = _estate(make_resource)
    report = engine.evaluate(estate, now, door=door)
    expected, passed, exempted = _plain_loop(
        engine, estate, EvalContext(now=now, catalog=engine.catalog), door)
    assert {_row(f.model_dump(mode="json")) for f in report.findings} == expected
    assert len(report.findings) == len(expected)
    assert {row[2] for row in expected} == {"fail", "unknown"}  # both kinds compared
    assert (report.summary.passed, report.summary.exempted) == (passed, exempted)
    assert passed > 0 and exempted > 0


@pytest.mark.parametrize("door", ["plan", "runtime"])  # the built-in budget is off at admission
def test_aggregation_takes_the_members_the_whole_scope_takes(make_resource: Make,
                                                             door: Door) -> None:
    """Aggregate policies' scopes, worked out per GPU state like the loop's, pick the same
    members (certain or not) and count the same exemptions as testing each scope whole."""
    policies = [p for p in load_policies(["builtin"]) if p.spec.aggregate]
    ctx = EvalContext(now=OFF_HOURS, catalog=builtin_catalog())
    aggregation = Aggregation(policies, ctx)
    expected: dict[tuple[str, Door], list[tuple[str, bool]]] = {}
    exempted = 0
    for resource in _estate(make_resource):
        ids = exempt_policies(resource)
        aggregation.offer(resource, door, ids, gpu_state(resource))
        for policy in policies:
            if resource.category not in policy.categories or policy.doors[door] == "off":
                continue
            if policy.id in ids or "all" in ids:
                exempted += 1
                continue
            scope = True if policy.scope is None else policy.scope.test(resource, ctx)
            if scope is not False:
                expected.setdefault((policy.id, door), []).append((resource.id, scope is True))
    taken = {key: [(member.resource.id, member.certain) for member in members]
             for key, members in aggregation._members.items()}
    assert taken == expected
    assert aggregation.exempted == exempted
    assert expected and exempted, "members and exemptions both compared"


SCOPE_WITH_EVIDENCE = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: spot-off-hours
    title: On-demand GPUs in their off-hours
    severity: low
    resources: [instance]
    parameters:
      default_schedule: "off=(M-F,19);on=(M-F,7);tz=utc"
      schedule_tag: gpuwarden-offhours
    scope:
      all:
        - has-gpu: true
        - offhours: {}
    violation: {field: capacity, op: ne, value: spot}
    message: "{{ r.name }} ({{ details.schedule }})"
"""


def test_a_scope_whose_evidence_speaks_when_it_holds_keeps_it(tmp_path: Path,
                                                              make_resource: Make) -> None:
    policy_file = tmp_path / "p.yaml"
    policy_file.write_text(SCOPE_WITH_EVIDENCE)
    engine = Engine(load_policies([str(policy_file)]))
    estate = [make_resource(id="i-1", instance_type="p3.2xlarge", capacity="on-demand")]
    report = engine.evaluate(estate, OFF_HOURS)
    expected, _, _ = _plain_loop(engine, estate,
                                 EvalContext(now=OFF_HOURS, catalog=engine.catalog), None)
    assert [f.result for f in report.findings] == ["fail"]
    assert "schedule" in report.findings[0].details
    assert {_row(f.model_dump(mode="json")) for f in report.findings} == expected


@pytest.mark.parametrize("op,value", [("eq", "spot"), ("ne", "spot"), ("in", ["spot", "reserved"]),
                                      ("not-in", ["spot"]), ("eq", None), ("ne", 1)])
@pytest.mark.parametrize("field", ["capacity", "state", "region", "count", "owner"])
def test_a_filter_on_one_field_reads_it_as_the_general_path_does(
        make_resource: Make, field: str, op: str, value: Any) -> None:
    condition = compile_condition({"field": field, "op": op, "value": value}, {})
    assert isinstance(condition, ValueCondition)
    ctx = EvalContext(now=OFF_HOURS, catalog=builtin_catalog())
    resources = [
        make_resource(capacity="spot", region="us-east-1", owner="me"),
        make_resource(capacity="on-demand", state="stopped"),
        make_resource(capacity="unknown", state="unknown", region=None),
        make_resource(capacity="on-demand", unknown=frozenset({field})),
    ]
    for resource in resources:
        assert condition.test(resource, ctx) == ValueCondition.test(condition, resource, ctx)


def test_the_summary_counted_in_the_loop_is_the_recount_of_the_report(make_resource: Make
                                                                      ) -> None:
    """The loop counts findings as it keeps them, in the order it judges them; the summary
    must be what counting the sorted report gives, down to the order of its per-policy,
    per-severity and per-account counts (the JSON report's bytes)."""
    engine = Engine(load_policies(["builtin"]))
    accounts = ("111111111111", "222222222222", None)
    estate = [resource.model_copy(update={"account": accounts[number % 3]})
              for number, resource in enumerate(_estate(make_resource))]
    # judged in reverse, the loop meets policies, severities and accounts in another order
    for resources in (estate, estate[::-1]):
        report = engine.evaluate(resources, OFF_HOURS)
        recount = summarize(report.findings, report.summary.resources, report.summary.passed,
                            report.summary.exempted, spend_usd=report.summary.monthly_spend_usd)
        assert report.summary.model_dump_json() == recount.model_dump_json()
        assert len(report.summary.by_policy) > 3 and len(report.summary.by_account) == 2
        assert report.summary.savings_usd > 0


def test_findings_made_without_validation_are_what_validating_makes(engine: Engine,
                                                                    make_resource: Make) -> None:
    """Findings and their references are built from dicts the engine makes (`trusted_of`):
    each must equal the validated model of the same values, its set of given fields too."""
    resources = [resource.model_copy(update={"account": "111111111111", "namespace": "ns"})
                 for resource in _estate(make_resource)]
    findings = engine.evaluate(resources, OFF_HOURS).findings
    assert len(findings) > 10
    by_id = {resource.id: resource for resource in resources}
    for finding in findings:
        validated = Finding.model_validate(finding.model_dump())
        assert finding == validated
        assert finding.model_fields_set == validated.model_fields_set
        assert finding.resource == ResourceRef.of(by_id[finding.resource.id])


def test_a_list_of_texts_keys_messages_apart_from_every_other_value() -> None:
    """Texts-only lists are keyed as the texts themselves (`plain_key`'s quick path): never
    equal to a list that prints otherwise, nor to another kind of sequence."""
    values: list[Any] = [["1"], [1], ("1",), frozenset({"1"}), ["1", "2"], ["2", "1"],
                         ["1", 2], [], ["1 "], [["1"]]]
    keys = [plain_key(value) for value in values]
    assert None not in keys and len(set(keys)) == len(keys)
    assert plain_key(["a", "b"]) == plain_key(["a", "b"])
    assert plain_key(["x"] * (MAX_ITEMS + 1)) is None


@pytest.mark.parametrize("usd", [0.0, 0.1, 123.456789, 999.99, 1000.0, 1e9])
@pytest.mark.parametrize("spend", [None, -5.0, 0.0, 0.3, 1000.0, 777.77])
def test_one_saving_is_what_combining_it_with_nothing_gives(usd: float, spend: float | None
                                                            ) -> None:
    """A resource with one saving takes a quick path: the same bits as the general one (a
    second saving of zero without a spend changes nothing there)."""
    def saving(amount: float, with_spend: float | None) -> Finding:
        details = {} if with_spend is None else {SPEND_DETAIL: with_spend}
        return Finding(policy="p", severity="high", result="fail", message="m",
                       resource=ResourceRef(provider="aws", kind="k", id="i", name="n"),
                       enforcement="deny", estimated_monthly_usd=amount, cost_kind="savings",
                       details=details)
    one = saving(usd, spend)
    assert combined_savings([one]) == combined_savings([one, saving(0.0, None)])
    assert combined_savings([one]).hex() == combined_savings([one, saving(0.0, None)]).hex()


def test_exemptions_are_read_whatever_keys_were_met_before() -> None:
    """Keys met that are no exemption key are remembered (bounded) to answer a resource with
    only such keys at once: an exemption key is never among them, even with an empty value."""
    assert exempt_ids({"team": "a", "env": "prod"}) == frozenset()
    assert exempt_ids({"team": "a", "env": "prod"}) == frozenset()
    assert exempt_ids({"team": "a", "GPUWARDEN_EXEMPT": "p1, p2"}) == {"p1", "p2"}
    assert exempt_ids({"team": "a"}, {"gpuwarden.io/exempt": "all"}) == {"all"}
    assert exempt_ids({"gpuwarden-exempt": ""}) == frozenset()
    assert exempt_ids({"gpuwarden-exempt": "spot"}) == {"spot"}
    for number in range(labels._MAX_NOT_EXEMPT_KEYS + 10):
        assert exempt_ids({f"key-{number}": "v"}) == frozenset()
    assert len(labels._NOT_EXEMPT_KEYS) <= labels._MAX_NOT_EXEMPT_KEYS
    long_key = "k" * (labels._MAX_KEY_CHARS + 1)
    assert exempt_ids({long_key: "v"}) == frozenset() and long_key not in labels._NOT_EXEMPT_KEYS
    assert exempt_ids({"key-1": "v", "Gpuwarden-Exempt": "all"}) == {"all"}
