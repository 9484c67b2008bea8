"""Enforce mode on a live cluster: apply planned `stop` remediations to Kubernetes workloads.

Deployments and StatefulSets are scaled to zero and CronJobs suspended; the previous value is
kept in an annotation so the workload can be restored. Guard rails:

- only findings whose remediation the planner marked `planned` (runtime deny, non-production);
- at most `max_actions` patches per run (blast radius);
- the object is read fresh before acting: one already stopped is skipped (idempotent), so is
  one whose labels or annotations now make it production or exempt (`engine.core.labels.protection`,
  the namespace's labels from the scan as the fallback), and the patch carries its
  resourceVersion, so a concurrent change makes it fail instead of clobbering;
- past the run's deadline nothing more is started (`deadline reached`);
- every attempt is written to a JSONL audit log before and after the call; if the log cannot be
  written nothing is changed;
- a failed call is recorded on the finding and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from engine.core.errors import InputError
from engine.core.labels import protection
from engine.core.model import Finding, Remediation, Report, Resource
from remediations.runner import DEADLINE_REACHED, Deadline, default_actor

PREVIOUS_REPLICAS = "gpuwarden.io/previous-replicas"
PREVIOUS_SUSPEND = "gpuwarden.io/previous-suspend"
STOP_ACTION = "stop"


@dataclass(frozen=True, slots=True)
class _Target:
    """How to read and patch one kind: client API class and method suffix."""

    api_version: str
    api_class: str
    method: str  # read_namespaced_<method> / patch_namespaced_<method>


_TARGETS: dict[str, _Target] = {
    "Deployment": _Target("apps/v1", "AppsV1Api", "deployment"),
    "StatefulSet": _Target("apps/v1", "AppsV1Api", "stateful_set"),
    "CronJob": _Target("batch/v1", "BatchV1Api", "cron_job"),
}


def apply_kubernetes_remediations(
    report: Report,
    resources: list[Resource],
    api_client: Any,
    *,
    max_actions: int,
    audit_log: Path,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    actor: str | None = None,
    deadline: Deadline | None = None,
) -> Report:
    """The report with each planned Kubernetes `stop` applied (or skipped/failed), mode enforce."""
    if max_actions < 0:
        raise InputError("--max-actions must be 0 or more")
    by_id = {(r.provider, r.id): r for r in resources}
    runner = _Runner(api_client, max_actions, now, actor or default_actor(), deadline)
    findings: list[Finding] = []
    try:
        with audit_log.open("a", encoding="utf-8") as log:
            runner.log = log
            for finding in report.findings:
                resource = by_id.get((finding.resource.provider, finding.resource.id))
                findings.append(runner.handle(finding, resource))
    except OSError as exc:
        raise InputError(f"cannot write audit log: {exc.strerror or exc}",
                         file=str(audit_log)) from None
    return report.model_copy(update={"findings": findings, "mode": "enforce"})


class _Runner:
    def __init__(self, api_client: Any, max_actions: int, now: Callable[[], datetime],
                 actor: str, deadline: Deadline | None = None):
        self.api_client = api_client
        self.deadline = deadline
        self.max_actions = max_actions
        self.now = now
        self.actor = actor
        self.attempts = 0
        self.done: set[str] = set()
        self.log: IO[str] | None = None

    def handle(self, finding: Finding, resource: Resource | None) -> Finding:
        remediation = finding.remediation
        if (remediation is None or remediation.action != STOP_ACTION
                or remediation.status != "planned" or resource is None
                or resource.provider != "kubernetes"):
            return finding
        status, detail = self.stop(finding, resource)
        updated = Remediation(action=remediation.action, status=status, detail=detail)
        return finding.model_copy(update={"remediation": updated})

    def stop(self, finding: Finding, resource: Resource) -> tuple[Any, str]:
        target = _TARGETS.get(resource.kind)
        if target is None:
            return "skipped", f"no scale-to-zero action for a {resource.kind}"
        if resource.id in self.done:
            return "skipped", f"{resource.id} already stopped in this run"
        if self.attempts >= self.max_actions:
            return "skipped", f"blast radius: --max-actions {self.max_actions} reached"
        namespace = resource.namespace or "default"
        ref = {"apiVersion": target.api_version, "kind": resource.kind,
               "namespace": namespace, "name": resource.name}
        if self.deadline is not None and self.deadline.reached():
            self._write("check", finding, ref, result="skipped", reason=DEADLINE_REACHED)
            return "skipped", DEADLINE_REACHED
        api = self._api(target)
        try:
            current = self.api_client.sanitize_for_serialization(
                getattr(api, f"read_namespaced_{target.method}")(resource.name, namespace))
        except Exception as exc:
            self._write("check", finding, ref, result="failed", error=_error_text(exc))
            return "failed", f"cannot read {resource.id}: {_error_text(exc)}"
        before = _stop_state(resource.kind, current)
        protected = _protection(finding.policy, resource, current)
        if protected:
            self._write("check", finding, ref, before=before, result="skipped", reason=protected)
            return "skipped", protected
        if _already_stopped(resource.kind, before):
            self._write("check", finding, ref, before=before, result="skipped",
                        reason="already stopped")
            return "skipped", f"{resource.id} is already stopped ({_describe(before)})"
        body = _stop_patch(resource.kind, before, current)
        self.attempts += 1
        self._write("before", finding, ref, before=before, patch=body)
        try:
            patched = self.api_client.sanitize_for_serialization(
                getattr(api, f"patch_namespaced_{target.method}")(resource.name, namespace, body))
        except Exception as exc:
            self._write("after", finding, ref, before=before, result="failed",
                        error=_error_text(exc))
            return "failed", f"patching {resource.id} failed: {_error_text(exc)}"
        after = _stop_state(resource.kind, patched)
        self.done.add(resource.id)
        self._write("after", finding, ref, before=before, after=after, result="applied")
        return "applied", f"{_verb(resource.kind)} {resource.id} (was {_describe(before)})"

    def _api(self, target: _Target) -> Any:
        from kubernetes import client

        return getattr(client, target.api_class)(self.api_client)

    def _write(self, phase: str, finding: Finding, ref: dict[str, str], **fields: Any) -> None:
        assert self.log is not None
        entry = {"time": self.now().isoformat(), "phase": phase, "actor": self.actor,
                 "action": STOP_ACTION, "policy": finding.policy, "target": ref, **fields}
        self.log.write(orjson.dumps(entry).decode() + "\n")
        self.log.flush()  # the "before" line must be on disk before the API call


def _protection(policy: str, resource: Resource, obj: dict[str, Any]) -> str | None:
    """Why the object as read now must not be changed: its labels or its pod template's say
    production (judged together, so a disagreement between them counts), or it is exempt."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if "jobTemplate" in spec:
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = (spec.get("template") or {}).get("metadata") or {}
    labels = {**{f"template/{key}": value for key, value in
                 (template.get("labels") or {}).items()}, **(metadata.get("labels") or {})}
    notes = {**(template.get("annotations") or {}), **(metadata.get("annotations") or {})}
    return protection(policy, labels, fallback=resource.namespace_labels, annotations=notes)


def _stop_state(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        return {"suspend": bool(spec.get("suspend"))}
    replicas = spec.get("replicas")
    return {"replicas": 1 if replicas is None else replicas}  # the API's default is 1


def _already_stopped(kind: str, state: dict[str, Any]) -> bool:
    return state.get("suspend") is True if kind == "CronJob" else state.get("replicas") == 0


def _stop_patch(kind: str, before: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    resource_version = (current.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if kind == "CronJob":
        metadata["annotations"] = {PREVIOUS_SUSPEND: str(before["suspend"]).lower()}
        return {"metadata": metadata, "spec": {"suspend": True}}
    metadata["annotations"] = {PREVIOUS_REPLICAS: str(before["replicas"])}
    return {"metadata": metadata, "spec": {"replicas": 0}}


def _verb(kind: str) -> str:
    return "suspended" if kind == "CronJob" else "scaled to zero"


def _describe(state: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in state.items())


def _error_text(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".rstrip()
    return " ".join(str(exc).split()) or type(exc).__name__
