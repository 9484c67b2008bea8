"""Remediation planning, the step after evaluation: each failing finding gets the first
applicable action its policy names, planned, never applied here (the enforcement runner
applies planned mutating actions in enforce mode).

Evaluation (`Engine.assess`) returns findings with what each one judged; `plan_remediations`
reads the resource and door from there, so the policy core never plans anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.core.evaluate import Evaluation, Judged
from engine.core.labels import is_production, production_reason
from engine.core.model import Door, Enforcement, Finding, Remediation, Report, Resource
from engine.core.policy import CompiledPolicy
from remediations.registry import ACTIONS


def plan_remediations(evaluation: Evaluation, policies: Iterable[CompiledPolicy]) -> Report:
    """The evaluation's report, each failing finding with its planned remediation."""
    actions = {policy.id: policy.spec.remediations for policy in policies}
    findings = [_planned(judged, actions.get(judged.finding.policy, ()))
                for judged in evaluation.judged]
    return evaluation.report.model_copy(update={"findings": findings})


def _planned(judged: Judged, names: Sequence[str]) -> Finding:
    finding, resource = judged.finding, judged.resource
    if finding.result != "fail" or resource is None or not names:
        return finding
    remediation = plan_remediation(names, resource, finding.details,
                                   enforcement=finding.enforcement, door=judged.door,
                                   production=is_production(resource))
    return finding if remediation is None else \
        finding.model_copy(update={"remediation": remediation})


def plan_remediation(
    names: Sequence[str],
    resource: Resource,
    details: dict[str, Any],
    *,
    enforcement: Enforcement,
    door: Door,
    production: bool | None,
) -> Remediation | None:
    """The first applicable action for a finding, planned (never applied here).

    Mutating actions apply only at runtime, only for `deny`, never to production resources;
    otherwise they are reported as skipped with the reason.
    """
    for name in names:
        act = ACTIONS[name]
        detail = act.advise(resource, details)
        if not act.mutating:
            return Remediation(action=name, status="planned", detail=detail)
        if door != "runtime":
            continue
        if enforcement != "deny":
            return Remediation(action=name, status="skipped",
                               detail=f"policy enforcement is {enforcement}, not deny")
        if production is not False:
            return Remediation(action=name, status="skipped",
                               detail="production (or unknown) resources are never changed: "
                               + production_reason(resource))
        return Remediation(action=name, status="planned", detail="would " + detail)
    return None
