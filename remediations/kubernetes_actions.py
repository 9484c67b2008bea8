"""Enforce mode on a live cluster: apply planned `stop` remediations to Kubernetes workloads.

Deployments and StatefulSets are scaled to zero and CronJobs suspended; the previous value is
kept in an annotation so the workload can be restored. Each also gets gpuwarden's stop mark
(`gpuwarden.io/stopped-by` = `<policy>@<evaluation instant>`, `gpuwarden.io/resume-schedule`),
and a planned `resume` (its schedule's on-hours began) scales it back to the recorded replicas,
or sets a CronJob's `spec.suspend` back to false, and removes the three annotations, only while
it is still at zero (still suspended) and still marked: a workload scaled down or suspended by
someone else carries no mark and stays down.
Guard rails:

- only findings whose remediation the planner marked `planned` (runtime deny, non-production);
- at most `max_actions` patches per run (blast radius);
- the object is read fresh before acting: one already stopped is skipped (idempotent), so is
  one whose labels or annotations now make it production or exempt (`engine.core.labels.protection`,
  the namespace's labels from the scan as the fallback), and the patch carries its
  resourceVersion, so a concurrent change makes it fail instead of clobbering;
- past the run's deadline nothing more is started (`deadline reached`);
- every attempt is written to a JSONL audit log before and after the call; if the log cannot be
  written nothing is changed. An applied line names the resource and carries `rate`, the
  workload's spend per hour at the replicas it stopped or started, for `gpuwarden savings`;
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
from engine.core.model import Finding, Remediation, Report, Resource, State
from remediations.planning import RESUME_SCHEDULE_ANNOTATION, STOPPED_BY_ANNOTATION, stop_marks
from remediations.runner import DEADLINE_REACHED, Deadline, default_actor

PREVIOUS_REPLICAS = "gpuwarden.io/previous-replicas"
PREVIOUS_SUSPEND = "gpuwarden.io/previous-suspend"
STOP_ACTION = "stop"
RESUME_ACTION = "resume"
ACTIONS = (STOP_ACTION, RESUME_ACTION)
RESUMABLE = frozenset({"Deployment", "StatefulSet", "CronJob"})
MAX_REPLICAS = 10_000  # a larger recorded count is not trusted


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
    runner.marked_at = report.generated_at
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
        self.done: set[tuple[str, str]] = set()  # (action, resource id)
        self.log: IO[str] | None = None
        self.marked_at: datetime | None = None  # the evaluation instant, in stop marks

    def handle(self, finding: Finding, resource: Resource | None) -> Finding:
        remediation = finding.remediation
        if (remediation is None or remediation.action not in ACTIONS
                or remediation.status != "planned" or resource is None
                or resource.provider != "kubernetes"):
            return finding
        act = self.stop if remediation.action == STOP_ACTION else self.resume
        status, detail = act(finding, resource)
        updated = Remediation(action=remediation.action, status=status, detail=detail)
        return finding.model_copy(update={"remediation": updated})

    def stop(self, finding: Finding, resource: Resource) -> tuple[Any, str]:
        target = _TARGETS.get(resource.kind)
        if target is None:
            return "skipped", f"no scale-to-zero action for a {resource.kind}"
        ref = _ref(target, resource)
        read = self._start(finding, resource, STOP_ACTION, target, ref)
        if isinstance(read, tuple):
            return read
        before = _stop_state(resource.kind, read)
        protected = _protection(finding.policy, resource, read)
        if protected:
            self._write("check", finding, ref, STOP_ACTION, before=before, result="skipped",
                        reason=protected)
            return "skipped", protected
        if _already_stopped(resource.kind, before):
            self._write("check", finding, ref, STOP_ACTION, before=before, result="skipped",
                        reason="already stopped")
            return "skipped", f"{resource.id} is already stopped ({_describe(before)})"
        body = _stop_patch(resource.kind, before, read)
        if resource.kind in RESUMABLE:
            body["metadata"]["annotations"].update(self._stop_marks(finding))
        return self._patch(finding, resource, STOP_ACTION, target, ref, before, body,
                           f"{_verb(resource.kind)} {resource.id} (was {_describe(before)})")

    def resume(self, finding: Finding, resource: Resource) -> tuple[Any, str]:
        """Scale a workload gpuwarden scaled to zero (its mark still on it) back to the replicas
        it recorded, or unsuspend a CronJob it suspended, and remove the mark."""
        target = _TARGETS.get(resource.kind) if resource.kind in RESUMABLE else None
        if target is None:
            return "skipped", f"no resume action for a {resource.kind}"
        ref = _ref(target, resource)
        read = self._start(finding, resource, RESUME_ACTION, target, ref)
        if isinstance(read, tuple):
            return read
        before = _stop_state(resource.kind, read)
        body, reason = (_unsuspend_patch if resource.kind == "CronJob" else _resume_patch)(
            resource.id, read)
        if body is None:
            self._write("check", finding, ref, RESUME_ACTION, before=before, result="skipped",
                        reason=reason)
            return "skipped", reason
        done = f"unsuspended {resource.id} (suspended by gpuwarden)" \
            if resource.kind == "CronJob" else \
            f"scaled {resource.id} back to {body['spec']['replicas']} replicas (stopped by " \
            "gpuwarden)"
        return self._patch(finding, resource, RESUME_ACTION, target, ref, before, body, done)

    def _stop_marks(self, finding: Finding) -> dict[str, str]:
        return stop_marks(finding, self.marked_at or self.now(), STOPPED_BY_ANNOTATION,
                          RESUME_SCHEDULE_ANNOTATION)

    def _start(self, finding: Finding, resource: Resource, action: str, target: _Target,
               ref: dict[str, str]) -> dict[str, Any] | tuple[Any, str]:
        """The object as read now, or (status, detail) when nothing is to be attempted: done
        already in this run, past the blast radius or the deadline, or unreadable."""
        if (action, resource.id) in self.done:
            return "skipped", f"{resource.id}: {action} already handled in this run"
        if self.attempts >= self.max_actions:
            return "skipped", f"blast radius: --max-actions {self.max_actions} reached"
        if self.deadline is not None and self.deadline.reached():
            self._write("check", finding, ref, action, result="skipped", reason=DEADLINE_REACHED)
            return "skipped", DEADLINE_REACHED
        try:
            current: dict[str, Any] = self.api_client.sanitize_for_serialization(
                getattr(self._api(target), f"read_namespaced_{target.method}")(
                    resource.name, ref["namespace"]))
        except Exception as exc:
            self._write("check", finding, ref, action, result="failed", error=_error_text(exc))
            return "failed", f"cannot read {resource.id}: {_error_text(exc)}"
        return current

    def _patch(self, finding: Finding, resource: Resource, action: str, target: _Target,
               ref: dict[str, str], before: dict[str, Any], body: dict[str, Any], done: str
               ) -> tuple[Any, str]:
        self.attempts += 1
        self._write("before", finding, ref, action, before=before, patch=body)
        try:
            patched = self.api_client.sanitize_for_serialization(
                getattr(self._api(target), f"patch_namespaced_{target.method}")(
                    resource.name, ref["namespace"], body))
        except Exception as exc:
            self._write("after", finding, ref, action, before=before, result="failed",
                        error=_error_text(exc))
            return "failed", f"patching {resource.id} failed: {_error_text(exc)}"
        after = _stop_state(resource.kind, patched)
        self.done.add((action, resource.id))
        self._write("after", finding, ref, action, before=before, after=after, result="applied",
                    rate=self._rate(resource, _running_replicas(action, before, body)))
        return "applied", done

    def _rate(self, resource: Resource, replicas: int | None) -> dict[str, Any]:
        return workload_rate(resource, replicas, self.marked_at or self.now())

    def _api(self, target: _Target) -> Any:
        from kubernetes import client

        return getattr(client, target.api_class)(self.api_client)

    def _write(self, phase: str, finding: Finding, ref: dict[str, str], action: str,
               **fields: Any) -> None:
        assert self.log is not None
        entry = {"time": self.now().isoformat(), "phase": phase, "actor": self.actor,
                 "action": action, "policy": finding.policy, "target": ref,
                 "resource": finding.resource.id, "account": finding.resource.account,
                 **fields}
        self.log.write(orjson.dumps(entry).decode() + "\n")
        self.log.flush()  # the "before" line must be on disk before the API call


def workload_rate(resource: Resource, replicas: int | None, at: datetime) -> dict[str, Any]:
    """The audit line's `rate`: the workload's spend per hour while it runs `replicas` replicas
    (the scanned count when None), from the cost model that priced its finding, which
    `gpuwarden savings` multiplies by the hours it stayed stopped."""
    from engine.core.budget import team_of
    from engine.core.catalog import HOURS_PER_MONTH, builtin_catalog
    from engine.core.costs import resource_spend

    running = resource.model_copy(update={"state": State.RUNNING} if replicas is None
                                  else {"state": State.RUNNING, "count": replicas})
    spend = resource_spend(running, builtin_catalog())
    usd = None if spend.monthly_usd is None else spend.monthly_usd / HOURS_PER_MONTH
    return {"usd_per_h": usd, "source": spend.basis.removesuffix(" × 730 h"),
            "capacity": str(resource.capacity), "team": team_of(resource),
            "replicas": replicas, "at": at.isoformat()}


def _running_replicas(action: str, before: dict[str, Any], body: dict[str, Any]) -> int | None:
    """The replicas a scale-down stopped or a resume started; None for a CronJob."""
    replicas = before.get("replicas") if action == STOP_ACTION else body["spec"].get("replicas")
    return replicas if isinstance(replicas, int) else None


def _ref(target: _Target, resource: Resource) -> dict[str, str]:
    return {"apiVersion": target.api_version, "kind": resource.kind,
            "namespace": resource.namespace or "default", "name": resource.name}


def _resume_patch(resource_id: str, current: dict[str, Any]
                  ) -> tuple[dict[str, Any] | None, str]:
    """(the patch that restores the recorded replicas and removes the mark, "") or (None, why
    not): no mark, an unreadable count, or no longer at zero (someone scaled it since)."""
    metadata = current.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if STOPPED_BY_ANNOTATION not in annotations:
        return None, f"{resource_id} carries no {STOPPED_BY_ANNOTATION} mark"
    recorded = str(annotations.get(PREVIOUS_REPLICAS, ""))
    if not recorded.isdigit() or int(recorded) > MAX_REPLICAS:
        return None, f"{resource_id}: {PREVIOUS_REPLICAS} {recorded[:32]!r} is not a count"
    replicas = (current.get("spec") or {}).get("replicas")
    if replicas != 0:
        return None, f"{resource_id} is no longer at zero (replicas {replicas})"
    patch_metadata: dict[str, Any] = {"annotations": {
        key: None for key in (STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION,
                              PREVIOUS_REPLICAS)}}
    if metadata.get("resourceVersion"):
        patch_metadata["resourceVersion"] = metadata["resourceVersion"]
    return {"metadata": patch_metadata, "spec": {"replicas": int(recorded)}}, ""


def _unsuspend_patch(resource_id: str, current: dict[str, Any]
                     ) -> tuple[dict[str, Any] | None, str]:
    """(the patch that sets a CronJob's `suspend` back to false and removes the mark, "") or
    (None, why not): no mark, it was suspended before gpuwarden came, or it is no longer
    suspended (someone resumed it since)."""
    metadata = current.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if STOPPED_BY_ANNOTATION not in annotations:
        return None, f"{resource_id} carries no {STOPPED_BY_ANNOTATION} mark"
    if annotations.get(PREVIOUS_SUSPEND) != "false":
        return None, f"{resource_id} was suspended before gpuwarden suspended it"
    if (current.get("spec") or {}).get("suspend") is not True:
        return None, f"{resource_id} is no longer suspended"
    patch_metadata: dict[str, Any] = {"annotations": {
        key: None for key in (STOPPED_BY_ANNOTATION, RESUME_SCHEDULE_ANNOTATION,
                              PREVIOUS_SUSPEND)}}
    if metadata.get("resourceVersion"):
        patch_metadata["resourceVersion"] = metadata["resourceVersion"]
    return {"metadata": patch_metadata, "spec": {"suspend": False}}, ""


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
