"""The finding path's shortcuts give what the long way gives: an unknown finding's message is
remembered by the unknown paths as its evidence lists them, and says what the sorted set of
them and its reasons say; an unknown finding whose scope held shows what all its evidence
shows; a model built from a dict said to name every field is the validated one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core import evaluate
from engine.core.conditions import EvalContext
from engine.core.evaluate import (
    _REASON_DETAILS,
    _UNKNOWN_REASONS,
    UNREAD_KIND,
    Engine,
    _why_unknown,
)
from engine.core.model import GpuSpec, Resource, ResourceRef, trusted_of, trusted_whole
from engine.core.policy import CompiledPolicy
from engine.loading.policies import load_policies
from tests.conftest import BUSINESS_HOURS, OFF_HOURS
from tests.test_engine_steps import _plain_loop, _row

Make = Callable[..., Resource]

_PATHS = [*_UNKNOWN_REASONS, "capacity", "encrypted", "instance_type", "telemetry.peak"]
_REASON_VALUES: list[Any] = [None, "", 0, 1, True, "late", "no samples"]
_POLICY: CompiledPolicy = next(p for p in load_policies(["builtin"]) if p.id == "gpu-idle")


def _expected(resource: Resource, details: dict[str, Any]) -> str:
    """The message the long way: the unknown paths sorted once each, every reason as text."""
    unknown = tuple(sorted(set(details.get("unknown", []))))
    reasons = tuple(str(details[key]) if details.get(key) else None for key in _REASON_DETAILS)
    unread = resource.kind if "gpu" in unknown and UNREAD_KIND in resource.unknown else None
    return (f"{resource.name}: cannot decide '{_POLICY.spec.title}': "
            f"{_why_unknown(unknown, reasons, unread)}")


@settings(max_examples=300, deadline=None,  # the factory keeps no state between inputs
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.sampled_from(_PATHS), max_size=5),
       reasons=st.dictionaries(st.sampled_from(_REASON_DETAILS), st.sampled_from(_REASON_VALUES)),
       unread=st.booleans(), kind=st.sampled_from(["Deployment", "NotebookServer"]),
       other=st.dictionaries(st.sampled_from(["window", "samples"]), st.just("7d")))
def test_an_unknown_message_is_what_its_paths_and_reasons_say(
        make_resource: Make, paths: list[str], reasons: dict[str, Any], unread: bool, kind: str,
        other: dict[str, Any]) -> None:
    resource = make_resource(kind=kind, unknown=frozenset({UNREAD_KIND} if unread else set()))
    details: dict[str, Any] = {**other, **reasons}
    if paths:
        details["unknown"] = paths
    assert evaluate._unknown_message(_POLICY, resource, details) == _expected(resource, details)
    assert len(evaluate._UNKNOWN_WHY) <= evaluate._MAX_UNKNOWN_WHY


def _unknown_estate(make: Make) -> list[Resource]:
    """Scopes that hold, are unknown or fail, with violations unknown (ones that speak only
    then among them), held or not."""
    tag_sets: list[dict[str, str]] = [{}, {"env": "dev"}, {"env": "prod"},
                                      {"team": "ml", "project": "p", "cost-center": "1"}]
    shapes: list[dict[str, Any]] = [
        {"instance_type": "p3.2xlarge", "capacity": "unknown", "unknown": frozenset({"capacity"})},
        {"instance_type": "p3.2xlarge", "capacity": "on-demand"},
        {"instance_type": "g5.xlarge", "capacity": "spot", "state": "unknown"},
        {"instance_type": None, "unknown": frozenset({"gpu", "instance_type"})},
        {"kind": "aws_ebs_volume", "category": "volume", "unknown": frozenset({"encrypted"})},
        {"provider": "kubernetes", "kind": "Deployment", "category": "workload",
         "gpu": GpuSpec(count=1, model="NVIDIA-A100-SXM4-40GB"), "capacity": "unknown",
         "unknown": frozenset({"capacity"})},
    ]
    return [make(id=f"u-{i}-{j}", name=f"u{i}{j}", tags=tags, **shape)
            for i, shape in enumerate(shapes) for j, tags in enumerate(tag_sets)]


@pytest.mark.parametrize("now", [OFF_HOURS, BUSINESS_HOURS])
def test_an_unknown_finding_whose_scope_held_shows_what_all_its_evidence_shows(
        make_resource: Make, now: Any) -> None:
    """An unknown violation speaks even where it would say nothing had it held: only the
    scope's evidence is left out when the scope held (`_Step.unknown_evidence`)."""
    engine = Engine([p for p in load_policies(["builtin"]) if not p.spec.aggregate])
    estate = _unknown_estate(make_resource)
    report = engine.evaluate(estate, now)
    expected, _, _ = _plain_loop(engine, estate, EvalContext(now=now, catalog=engine.catalog),
                                 None)
    assert {_row(f.model_dump(mode="json")) for f in report.findings} == expected
    assert len(report.findings) == len(expected)
    assert any(f.policy == "gpu-spot-required" and f.details == {"unknown": ["capacity"]}
               for f in report.findings), "an unknown of a quiet violation in its scope"


def test_shown_passes_are_the_passes_counted(make_resource: Make) -> None:
    """With passes shown, each pass the loop counts is a finding too, and the rest stay."""
    engine = Engine([p for p in load_policies(["builtin"]) if not p.spec.aggregate])
    estate = _unknown_estate(make_resource)
    quiet = engine.evaluate(estate, OFF_HOURS)
    shown = engine.evaluate(estate, OFF_HOURS, show_passed=True)
    passes = [f for f in shown.findings if f.result == "pass"]
    assert len(passes) == shown.summary.passed == quiet.summary.passed > 0
    assert [f for f in shown.findings if f.result != "pass"] == quiet.findings


def test_a_model_trusted_whole_is_the_validated_one_and_a_partial_one_says_so() -> None:
    """`trusted_whole` (every field named) sets what validating sets; `trusted_of` of a dict
    that leaves fields to their defaults gives only the names it was given, as pydantic does."""
    whole = {"provider": "aws", "kind": "aws_instance", "id": "i-1", "name": "trainer",
             "region": "us-east-1", "account": None, "namespace": None}
    assert set(whole) == set(ResourceRef.model_fields)
    fast = trusted_whole(ResourceRef, dict(whole))
    slow = ResourceRef.model_validate(whole)
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert fast.model_dump_json() == slow.model_dump_json()
    partial = {key: value for key, value in whole.items() if key != "namespace"}
    fast = trusted_of(ResourceRef, partial)
    slow = ResourceRef.model_validate(partial)
    assert fast.model_fields_set == slow.model_fields_set == set(partial)
    assert trusted_of(ResourceRef, dict(whole)).model_fields_set == set(whole)
