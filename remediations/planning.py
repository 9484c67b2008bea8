"""Remediation planning, the step after evaluation: each failing finding gets the first
applicable action its policy names, planned, never applied here (the enforcement runner
applies planned mutating actions in enforce mode).

Evaluation (`Engine.assess`) returns findings with what each one judged; `plan_remediations`
reads the resource and door from there, so the policy core never plans anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from engine.core import offhours
from engine.core.evaluate import Evaluation, Judged
from engine.core.labels import is_production, production_reason
from engine.core.model import (
    Door,
    Enforcement,
    Finding,
    Remediation,
    Report,
    Resource,
    ResourceRef,
    Severity,
)
from engine.core.policy import CompiledPolicy
from remediations.registry import ACTIONS

# gpuwarden's own mark on what it stopped: "<policy>@<ISO time>", and the schedule to resume on
STOPPED_BY_TAG = "gpuwarden:stopped-by"  # AWS and Azure tags
RESUME_SCHEDULE_TAG = "gpuwarden:resume-schedule"
# GCP label keys and values allow only lower-case letters, digits, `_` and `-`: the mark is
# "<policy>_<yyyymmddThhmmssZ, lower-cased>" and the schedule is in its escaped form
STOPPED_BY_LABEL = "gpuwarden-stopped-by"
RESUME_SCHEDULE_LABEL = "gpuwarden-resume-schedule"
LABEL_TIME_FORMAT = "%Y%m%dt%H%M%Sz"
STOPPED_BY_ANNOTATION = "gpuwarden.io/stopped-by"  # Kubernetes objects
RESUME_SCHEDULE_ANNOTATION = "gpuwarden.io/resume-schedule"
MARKS = ((STOPPED_BY_TAG, RESUME_SCHEDULE_TAG), (STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL),
         (STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION))
OFFHOURS_TAG = "gpuwarden-offhours"  # the resource's own schedule, when no schedule was marked
MAX_MARK_CHARS = 512  # AWS tag values hold 256; a longer "mark" is not gpuwarden's
# the kinds an executor can resume
RESUMABLE_KINDS = frozenset({
    "aws_instance", "aws_autoscaling_group", "aws_eks_node_group", "google_compute_instance",
    "google_container_node_pool", "aws_sagemaker_notebook_instance",
    "azurerm_linux_virtual_machine", "azurerm_windows_virtual_machine",
    "azurerm_kubernetes_cluster_node_pool", "Deployment", "StatefulSet", "CronJob"})


def plan_remediations(evaluation: Evaluation, policies: Iterable[CompiledPolicy]) -> Report:
    """The evaluation's report, each failing finding with its planned remediation."""
    actions = remediation_actions(policies)
    findings = [planned_finding(judged, actions) for judged in evaluation.judged]
    return evaluation.report.model_copy(update={"findings": findings})


def remediation_actions(policies: Iterable[CompiledPolicy]) -> dict[str, Sequence[str]]:
    """Each policy's remediations by policy id."""
    return {policy.id: policy.spec.remediations for policy in policies}


def planned_finding(judged: Judged, actions: Mapping[str, Sequence[str]]) -> Finding:
    """One judged finding with its planned remediation, as `plan_remediations` plans it (for
    a scan that plans each finding as it is made: `Engine.assess(settle=...)`)."""
    return _planned(judged, actions.get(judged.finding.policy, ()))


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


def plan_resumes(report: Report, resources: Iterable[Resource], now: datetime) -> Report:
    """The report with a planned `resume` for each resource gpuwarden itself stopped (its
    STOPPED_BY_TAG mark) whose schedule is on at `now`; a resource without the mark is never
    resumed."""
    resumes = [finding for resource in resources
               if (finding := _resume_finding(resource, now)) is not None]
    if not resumes:
        return report
    return report.model_copy(update={"findings": [*report.findings, *resumes]})


def _resume_finding(resource: Resource, now: datetime) -> Finding | None:
    if resource.kind not in RESUMABLE_KINDS:
        return None
    mark = stop_mark(resource)
    if mark is None:
        return None
    policy, stopped_at, text = mark
    try:
        if offhours.parse_schedule(text).is_off(now):
            return None
    except offhours.OffhoursError:
        return None  # an unreadable schedule: leave it stopped rather than guess
    return Finding(
        policy=policy, severity=Severity.INFO, result="pass", resource=ResourceRef.of(resource),
        message=f"{resource.name} was stopped by gpuwarden at {stopped_at}; its on-hours began",
        enforcement="deny",
        remediation=Remediation(action="resume", status="planned",
                                detail=f"would resume {resource.id} (stopped at {stopped_at})"),
        details={"stopped_at": stopped_at, "schedule": text},
    )


def resume_refusal(what: str, mark: str, *, marked: bool, at_zero: bool) -> str | None:
    """Why a resource scaled to zero is not resumed: it carries no readable mark of gpuwarden's
    (someone else scaled it down), or it is no longer at zero (someone scaled it since)."""
    if not marked:
        return f"{what} carries no {mark} mark"
    if not at_zero:
        return f"{what} is no longer at zero"
    return None


def stop_marks(finding: Finding, at: datetime, stopped_by: str = STOPPED_BY_TAG,
               schedule_key: str = RESUME_SCHEDULE_TAG) -> dict[str, str]:
    """gpuwarden's mark as tags or annotations: who stopped it and when, and the schedule on
    which to resume it (what `stop_mark` reads back; GCP labels: `stop_mark_labels`)."""
    marks = {stopped_by: f"{finding.policy}@{at.isoformat()}"}
    schedule = finding.details.get("schedule")
    if isinstance(schedule, str) and schedule:
        marks[schedule_key] = schedule[:256]
    return marks


def stop_mark(resource: Resource) -> tuple[str, str, str] | None:
    """(policy, when it was stopped, the schedule to resume on) from gpuwarden's mark on the
    resource (tags, labels or annotations); None when it carries none, or one unreadable."""
    for stopped_by, schedule_key in MARKS:
        parsed = _parse_mark(_mark_value(resource, stopped_by))
        if parsed is not None:
            schedule = _mark_value(resource, schedule_key) or \
                _mark_value(resource, OFFHOURS_TAG) or offhours.DEFAULT_SCHEDULE
            return (*parsed, schedule)
    return None


def _mark_value(resource: Resource, key: str) -> str:
    """A tag or annotation; one longer than any mark gpuwarden writes reads as none."""
    value = resource.tags.get(key) or resource.annotations.get(key) or ""
    return value if len(value) <= MAX_MARK_CHARS else ""


def _parse_mark(mark: str) -> tuple[str, str] | None:
    """"<policy>@<ISO time>", or a GCP label's "<policy>_<yyyymmddthhmmssz>"."""
    if "@" in mark:
        policy, _, stopped_at = mark.partition("@")
        return (policy, stopped_at) if policy and stopped_at else None
    policy, _, stamp = mark.rpartition("_")
    try:
        at = datetime.strptime(stamp, LABEL_TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None
    return (policy, at.isoformat()) if policy else None
