"""Evaluation: compiled policies × normalized resources → findings and a report. Pure: no I/O,
the clock is an argument."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from engine.aggregates import Aggregation
from engine.catalog import Catalog, builtin_catalog
from engine.conditions import EvalContext
from engine.costs import estimate
from engine.labels import exempt_policies, is_production
from engine.model import (
    Category,
    Door,
    Finding,
    Report,
    Resource,
    ResourceRef,
    Severity,
    State,
    Summary,
)
from engine.policy import CompiledPolicy

if TYPE_CHECKING:
    from engine.rego.findings import RegoOutcome
    from engine.sources.terraform import PlanCostChange
from remediations.registry import plan_remediation

Verdict = Literal["fail", "unknown", "pass"]
Outcome = Literal["fail", "unknown", "pass", "n/a"]


def door_of(resource: Resource) -> Door:
    """Planned resources meet the plan door's enforcement; everything live the runtime door's."""
    return "plan" if resource.state is State.PLANNED else "runtime"


class Engine:
    """Compiled policies, ready to evaluate any number of resources."""

    def __init__(self, policies: Sequence[CompiledPolicy], catalog: Catalog | None = None):
        self.policies = list(policies)
        self.catalog = catalog or builtin_catalog()
        self._by_category: dict[Category, list[CompiledPolicy]] = {c: [] for c in Category}
        # Rego policies over the whole plan run once per plan document, not per resource.
        self._plan_policies = [p for p in self.policies if p.rego and p.rego.reads_plan]
        # Aggregate policies judge groups of resources after the per-resource pass.
        self._aggregate_policies = [p for p in self.policies if p.spec.aggregate]
        for policy in self.policies:
            if (policy.rego and policy.rego.reads_plan) or policy.spec.aggregate:
                continue
            for category in policy.categories:
                self._by_category[category].append(policy)

    def verdict(self, policy: CompiledPolicy, resource: Resource, ctx: EvalContext) -> Outcome:
        """`n/a` when the resource is outside the policy's scope (not counted as a pass)."""
        scope = True if policy.scope is None else policy.scope.test(resource, ctx)
        if scope is False:
            return "n/a"
        result = policy.violation.test(resource, ctx)
        if result is False:
            return "pass"
        return "fail" if result and scope else "unknown"

    def evaluate(
        self,
        resources: Iterable[Resource],
        now: datetime,
        *,
        door: Door | None = None,
        show_passed: bool = False,
        mode: Literal["dry-run", "enforce"] = "dry-run",
        generated_at: datetime | None = None,
        plans: Sequence[Mapping[str, Any]] = (),
        cost_changes: Sequence[PlanCostChange] | None = None,
    ) -> Report:
        """`plans`: the Terraform plan documents the resources came from, for Rego policies
        that read the whole plan (`input: plan`); without them those policies do not run.
        `cost_changes`: the plan's changes before and after (`plan_cost_changes`), for the
        team budget's cost diff."""
        ctx = EvalContext(now=now, catalog=self.catalog)
        findings: list[Finding] = []
        count = passed = exempted = 0
        aggregation = Aggregation(self._aggregate_policies, ctx, cost_changes) \
            if self._aggregate_policies else None
        by_id: dict[str, Resource] = {}
        whole_plans = bool(plans) and bool(self._plan_policies) and door in (None, "plan")
        with _collector_paused():
            for resource in resources:
                count += 1
                if whole_plans:
                    by_id.setdefault(resource.id, resource)
                resource_door = door or door_of(resource)
                exempt_ids = exempt_policies(resource) if resource.tags or resource.annotations \
                    else frozenset()
                if aggregation is not None:
                    aggregation.offer(resource, resource_door, exempt_ids)
                for policy in self._by_category[resource.category]:
                    if policy.doors[resource_door] == "off":
                        continue
                    if (exempt_ids and (policy.id in exempt_ids or "all" in exempt_ids)) or (
                        policy.exempt and _exempt_by_policy(policy, resource)
                    ):
                        exempted += 1
                        continue
                    if policy.rego is not None:
                        outcome = _rego_outcome(self, policy, resource, ctx, resource_door,
                                                show_passed)
                        passed += outcome.passed
                        findings.extend(outcome.findings)
                        continue
                    verdict = self.verdict(policy, resource, ctx)
                    if verdict == "n/a":
                        continue
                    if verdict == "pass":
                        passed += 1
                        if not show_passed:
                            continue
                    findings.append(self.finding(policy, resource, ctx, verdict, resource_door))
            if whole_plans:
                from engine.rego.findings import plan_outcome

                planned = plan_outcome(self, self._plan_policies, plans, by_id)
                findings.extend(planned.findings)
                exempted += planned.exempted
            if aggregation is not None:
                for policy, group, group_door in aggregation.groups(door):
                    verdict = _group_verdict(policy, group, ctx)
                    passed += verdict == "pass"
                    if verdict != "pass" or show_passed:
                        findings.append(self.finding(policy, group, ctx, verdict, group_door))
                exempted += aggregation.exempted
        findings.sort(key=lambda f: (-f.estimated_monthly_usd, -f.severity.rank, f.policy,
                                     f.resource.id))
        return Report(
            generated_at=generated_at or now,
            mode=mode,
            findings=findings,
            summary=summarize(findings, count, passed, exempted),
            cost_diff=aggregation.cost_diff if aggregation is not None else None,
        )

    def finding(
        self,
        policy: CompiledPolicy,
        resource: Resource,
        ctx: EvalContext,
        verdict: Verdict,
        door: Door,
    ) -> Finding:
        details: dict[str, Any] = {}
        for node in policy.evidence_nodes:
            for key, value in node.evidence(resource, ctx).items():
                if key == "unknown":
                    details.setdefault("unknown", []).extend(value)
                else:
                    details.setdefault(key, value)  # the violation's evidence comes first
        cost = estimate(policy.spec.cost, resource, self.catalog, details)
        enforcement = policy.doors[door]
        if verdict == "unknown":
            message = _unknown_message(policy, resource, details)
        else:
            message = policy.render_message(
                resource=resource, r=resource, params=policy.spec.parameters, details=details,
                cost=cost.monthly_usd, verdict=verdict,
            )
        remediation = None
        if verdict == "fail":
            remediation = plan_remediation(
                policy.spec.remediations, resource, details, enforcement=enforcement,
                door=door, production=is_production(resource),
            )
        return Finding(
            policy=policy.id,
            title=policy.spec.title,
            severity=_severity(policy, details),
            result=verdict,
            resource=ResourceRef.of(resource),
            message=message,
            enforcement=enforcement,
            estimated_monthly_usd=cost.monthly_usd if verdict == "fail" else 0.0,
            cost_basis=cost.basis,
            remediation=remediation,
            location=resource.location,
            details=details,
        )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Evaluation allocates many small objects and no cycles: pausing the cyclic garbage
    collector for the loop saves about a quarter of its time on large estates."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _rego_outcome(engine: Engine, policy: CompiledPolicy, resource: Resource, ctx: EvalContext,
                  door: Door, show_passed: bool) -> RegoOutcome:
    from engine.rego.findings import resource_outcome

    return resource_outcome(engine, policy, resource, ctx, door, show_passed)


def _group_verdict(policy: CompiledPolicy, group: Resource, ctx: EvalContext) -> Verdict:
    """An aggregate policy's violation tested on a group (its scope chose the members)."""
    result = policy.violation.test(group, ctx)
    return "pass" if result is False else "fail" if result else "unknown"


def _severity(policy: CompiledPolicy, details: Mapping[str, Any]) -> Severity:
    """The policy's severity, or a lower one a check's evidence asks for (`severity`: an
    advisory case of the policy, such as a legacy GPU generation in gpu-right-size)."""
    lowered = details.get("severity")
    if isinstance(lowered, str) and lowered in {s.value for s in Severity}:
        return min(policy.spec.severity, Severity(lowered), key=lambda s: s.rank)
    return policy.spec.severity


def _exempt_by_policy(policy: CompiledPolicy, resource: Resource) -> bool:
    return any(pattern.match(resource.id) for pattern in policy.exempt)


_UNKNOWN_REASONS = {
    "telemetry": "no GPU telemetry for it",
    "gpu": "its GPU configuration is not known yet",
    "gpu.declared_memory_gib": "no declared (gpuwarden.io/gpu-memory) or observed GPU memory",
    "workload": "its Kubernetes workload facts are missing",
    "workload.shared_gpu": "whether its GPUs are shared is not known (it selects a device-plugin "
    "configuration or time-sliced nodes only in part)",
    "workload.namespace_network_policies": "its namespace's NetworkPolicies were not listed",
    "members.hourly_usd": "the price of some of its GPU resources is not known",
}


def _unknown_message(policy: CompiledPolicy, resource: Resource, details: dict[str, Any]) -> str:
    unknown = sorted(set(details.get("unknown", [])))
    reasons = [_UNKNOWN_REASONS[path] for path in unknown if path in _UNKNOWN_REASONS]
    if details.get("schedule_error"):
        reasons.append(str(details["schedule_error"]))
    if details.get("telemetry_reason"):
        reasons.append(str(details["telemetry_reason"]))
    plain = [path for path in unknown if path not in _UNKNOWN_REASONS]
    if plain:
        reasons.append("value(s) known only after apply: " + ", ".join(plain))
    why = "; ".join(reasons) or "a value it depends on is not known yet"
    return f"{resource.name}: cannot decide '{policy.spec.title}': {why}"


def overlap_free_total(findings: Iterable[Finding]) -> float:
    """Per resource, the largest single estimate: fixes overlap (a stopped GPU saves its spot
    discount too), so adding every finding's dollars would count the same money twice."""
    largest: dict[tuple[str, str], float] = {}
    for finding in findings:
        key = (finding.resource.provider, finding.resource.id)
        largest[key] = max(largest.get(key, 0.0), finding.estimated_monthly_usd)
    return round(sum(largest.values()), 2)


def summarize(findings: list[Finding], resources: int, passed: int, exempted: int = 0) -> Summary:
    failing = [f for f in findings if f.result != "pass"]
    return Summary(
        resources=resources,
        findings=len(failing),
        failed=sum(1 for f in failing if f.result == "fail"),
        unknown=sum(1 for f in failing if f.result == "unknown"),
        passed=passed,
        exempted=exempted,
        by_policy=dict(Counter(f.policy for f in failing)),
        by_severity=dict(Counter(f.severity.value for f in failing)),
        estimated_monthly_usd=overlap_free_total(failing),
    )
