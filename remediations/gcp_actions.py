"""Enforce mode on Google Cloud: stop Compute Engine instances, mark violations with a label.
GKE node pools are scaled to zero and back (`remediations.gke_actions`) with the same marks.

- `stop`: `instances.stop`; an instance already TERMINATED, STOPPED, STOPPING, SUSPENDED or
  SUSPENDING is skipped, and so is one that no longer exists (idempotent). The call returns as
  soon as Compute Engine accepts the operation; the audit log records its name and status.
  First gpuwarden's stop mark is set (`instances.setLabels`, the way back before the change):
  `gpuwarden-stopped-by` = `<policy>_<yyyymmddthhmmssz>` (the evaluation instant) and
  `gpuwarden-resume-schedule` = the schedule in Custodian's escaped form, when it fits a label.
- `resume` (planned when the mark's schedule is on): `instances.start` of an instance that still
  carries the mark and is TERMINATED or STOPPED, then the mark's labels are removed. An instance
  stopped by anyone else carries no mark and is never started.
- `mark-violation`: `instances.setLabels` with label `gpuwarden-violation` =
  `<policy>_<yyyymmdd>` (GCP label values cannot hold `@`, `:`, `/` or `,`, so one label holds
  one mark: a mark for another policy is replaced, and the audit log keeps the old value). The
  labels and their fingerprint are read first, so other labels are kept and a concurrent change
  makes the call fail instead of clobbering it. An instance already marked for the policy is
  skipped, so the date is that of the first mark.

Each check reads the instance fresh, its labels included, before anything is changed: one that
has become production or exempt since the listing is skipped (`engine.core.labels.protection`; the
project's labels from the listing stay the fallback). The runner
(`remediations.runner`) supplies the blast radius, audit log and failure handling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.core.labels import protection
from engine.core.model import Finding, Report, Resource
from engine.sources.gcp import GcpClients, describe_error
from remediations.gke_actions import NODE_POOL_KIND, NodePoolActions
from remediations.planning import (
    LABEL_TIME_FORMAT,
    RESUME_SCHEDULE_LABEL,
    STOPPED_BY_LABEL,
)
from remediations.runner import (
    Change,
    Check,
    Clock,
    Deadline,
    NoChange,
    run_enforcement,
    utc_now,
)

STOP_ACTION = "stop"
MARK_ACTION = "mark-violation"
RESUME_ACTION = "resume"
RESUMABLE = frozenset({"TERMINATED", "STOPPED"})  # a stopped VM; SUSPENDED needs `resume`
VIOLATION_LABEL = "gpuwarden-violation"
INSTANCE_KIND = "google_compute_instance"
ALREADY_STOPPED = frozenset({"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED"})
_INSTANCE_PATH = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/"
                            r"(?P<instance>[^/]+)$")
_LABEL_VALUE_INVALID = re.compile(r"[^a-z0-9_-]")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# Custodian's escapes for the characters a label value cannot hold (docs/offhours.md)
_SCHEDULE_ESCAPES = {"(": "u28", ")": "u29", "[": "u5b", "]": "u5d", ",": "u2c", ";": "u3b",
                     "=": "u3d", "/": "u2f"}
_UNESCAPE = re.compile(r"u(28|29|5b|5d|2c|3b|3d|2f|2d)")


class ActionError(Exception):
    """A failed API call, worded like the source's warnings (one line, no request URL)."""


@dataclass(frozen=True, slots=True)
class InstanceRef:
    project: str
    zone: str
    instance: str

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.instance}"

    def params(self) -> dict[str, str]:
        return {"project": self.project, "zone": self.zone, "instance": self.instance}


def instance_ref(resource: Resource) -> InstanceRef | None:
    found = _INSTANCE_PATH.match(resource.id) if resource.kind == INSTANCE_KIND else None
    if found is None:
        return None
    return InstanceRef(found.group("project"), found.group("zone"), found.group("instance"))


def violation_label(policy: str, clock: Clock) -> str:
    """`<policy>_<yyyymmdd>`, within GCP's label value rules (lowercase, digits, `_`, `-`)."""
    safe = _LABEL_VALUE_INVALID.sub("_", policy.lower())
    return f"{safe[:54]}_{clock():%Y%m%d}"


def stop_mark_labels(policy: str, at: datetime, schedule: object) -> dict[str, str]:
    """gpuwarden's stop mark as GCP labels: who stopped it and when, and the schedule to resume
    on (left out when its escaped form does not fit a label value: the resume then follows the
    instance's own gpuwarden-offhours label, else the default schedule)."""
    safe = _LABEL_VALUE_INVALID.sub("_", policy.lower())
    labels = {STOPPED_BY_LABEL: f"{safe[:46]}_{at.astimezone(UTC).strftime(LABEL_TIME_FORMAT)}"}
    escaped = escaped_schedule(schedule) if isinstance(schedule, str) else None
    if escaped:
        labels[RESUME_SCHEDULE_LABEL] = escaped
    return labels


def escaped_schedule(text: str) -> str | None:
    """An offhours schedule as a GCP label value (Custodian's `uXX` escapes), or None when it
    cannot be one: too long, or a character no escape covers, or one that would read back
    differently."""
    plain = "".join(text.lower().split())
    escaped = "".join(_SCHEDULE_ESCAPES.get(char, char) for char in plain)
    if not _LABEL_VALUE.match(escaped) or _unescape(escaped) != plain:
        return None
    return escaped


def _unescape(value: str) -> str:
    chars = {code: char for char, code in _SCHEDULE_ESCAPES.items()} | {"u2d": "-"}
    return _UNESCAPE.sub(lambda match: chars[match.group(0)], value)


def _marked_policy(value: str | None) -> str | None:
    return value.rsplit("_", 1)[0] if value else None


def apply_gcp_remediations(
    report: Report,
    resources: list[Resource],
    clients: GcpClients,
    *,
    max_actions: int,
    audit_log: Path,
    actor: str | None = None,
    clock: Clock = utc_now,
    deadline: Deadline | None = None,
) -> Report:
    """The report with each planned GCP action applied (or skipped/failed), mode enforce."""
    actions = GcpActions(clients, clock, marked_at=report.generated_at)
    checks: dict[str, Check] = {STOP_ACTION: actions.stop, MARK_ACTION: actions.mark,
                                RESUME_ACTION: actions.resume}
    return run_enforcement(report, resources, provider="gcp", checks=checks,
                           max_actions=max_actions, audit_log=audit_log, actor=actor,
                           clock=clock, deadline=deadline)


def _protection(finding: Finding, resource: Resource, current: Any) -> str | None:
    return protection(finding.policy, dict(current.labels), fallback=resource.namespace_labels)


class GcpActions:
    """The checks for each action; each reads fresh state and returns what to do."""

    def __init__(self, clients: GcpClients, clock: Clock, *,
                 marked_at: datetime | None = None) -> None:
        self.clients = clients
        self.clock = clock
        self.marked_at = marked_at  # the evaluation instant (`--now`), written in stop marks
        self.pools = NodePoolActions(clients)

    def _read(self, ref: InstanceRef) -> Any | None:
        """The instance as it is now; None when it no longer exists."""
        from google.api_core.exceptions import NotFound

        try:
            return self.clients.instances.get(**ref.params(), retry=self.clients.retry)
        except NotFound:
            return None
        except Exception as exc:
            raise ActionError(describe_error(exc)[0]) from exc

    def _marks(self, finding: Finding) -> dict[str, str]:
        return stop_mark_labels(finding.policy, self.marked_at or self.clock(),
                                finding.details.get("schedule"))

    def stop(self, finding: Finding, resource: Resource) -> Change | NoChange:
        if resource.kind == NODE_POOL_KIND:
            return self.pools.stop(finding, resource, self._marks(finding))
        ref = instance_ref(resource)
        if ref is None:
            return NoChange(f"no stop action for a {resource.kind}")
        current = self._read(ref)
        if current is None:
            return NoChange(f"{ref.path} no longer exists")
        before = {"status": current.status}
        protected = _protection(finding, resource, current)
        if protected:
            return NoChange(protected, before)
        if current.status in ALREADY_STOPPED:
            return NoChange(f"{ref.path} is already stopped (status {current.status})", before)
        marks = self._marks(finding)
        labels = {**dict(current.labels), **marks}

        def apply() -> dict[str, Any]:
            self._set_labels(ref, current.label_fingerprint, labels)  # the way back, first
            return self._operation(lambda: self.clients.instances.stop_unary(**ref.params()))

        request = {"instances.setLabels": {**ref.params(), "labels": marks},
                   "instances.stop": ref.params()}
        return Change(before, request, apply, f"stopped {ref.path} (was {current.status})")

    def resume(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Start an instance gpuwarden stopped (its mark still on it), then remove the mark; a
        node pool gets its recorded size back."""
        if resource.kind == NODE_POOL_KIND:
            return self.pools.resume(resource)
        ref = instance_ref(resource)
        if ref is None:
            return NoChange(f"no resume action for a {resource.kind}")
        current = self._read(ref)
        if current is None:
            return NoChange(f"{ref.path} no longer exists")
        before = {"status": current.status}
        if STOPPED_BY_LABEL not in current.labels:
            return NoChange(f"{ref.path} carries no {STOPPED_BY_LABEL} label", before)
        if current.status not in RESUMABLE:
            return NoChange(f"{ref.path} is {current.status}, not stopped", before)

        def apply() -> dict[str, Any]:
            started = self._operation(lambda: self.clients.instances.start_unary(
                **ref.params()))
            now = self._read(ref)
            if now is not None:
                kept = {key: value for key, value in now.labels.items()
                        if key not in (STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL)}
                self._set_labels(ref, now.label_fingerprint, kept)
            return started

        request = {"instances.start": ref.params(), "instances.setLabels": {
            **ref.params(), "remove": [STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL]}}
        return Change(before, request, apply,
                      f"resumed {ref.path} (was {current.status}, stopped by gpuwarden)")

    def _set_labels(self, ref: InstanceRef, fingerprint: str, labels: dict[str, str]) -> None:
        from google.cloud import compute_v1

        body = compute_v1.InstancesSetLabelsRequest(label_fingerprint=fingerprint,
                                                    labels=labels)
        self._operation(lambda: self.clients.instances.set_labels_unary(
            **ref.params(), instances_set_labels_request_resource=body))

    def mark(self, finding: Finding, resource: Resource) -> Change | NoChange:
        from google.cloud import compute_v1

        ref = instance_ref(resource)
        if ref is None:
            return NoChange(f"no labelling action for a {resource.kind}")
        current = self._read(ref)
        if current is None:
            return NoChange(f"{ref.path} no longer exists")
        labels = dict(current.labels)
        existing = labels.get(VIOLATION_LABEL)
        before = {VIOLATION_LABEL: existing}
        protected = _protection(finding, resource, current)
        if protected:
            return NoChange(protected, before)
        wanted = violation_label(finding.policy, self.clock)
        if _marked_policy(existing) == _marked_policy(wanted):
            return NoChange(f"{ref.path} is already marked {VIOLATION_LABEL}={existing}", before)
        body = compute_v1.InstancesSetLabelsRequest(
            label_fingerprint=current.label_fingerprint, labels={**labels, VIOLATION_LABEL: wanted})

        def apply() -> dict[str, Any]:
            after = self._operation(lambda: self.clients.instances.set_labels_unary(
                **ref.params(), instances_set_labels_request_resource=body))
            return {VIOLATION_LABEL: wanted, **after}

        request = {"instances.setLabels": {**ref.params(), "labelFingerprint":
                                           current.label_fingerprint,
                                           "labels": {VIOLATION_LABEL: wanted}}}
        return Change(before, request, apply, f"labelled {ref.path} {VIOLATION_LABEL}={wanted}")

    @staticmethod
    def _operation(call: Any) -> dict[str, Any]:
        """Make the call; the accepted Operation's name and status, or ActionError."""
        try:
            operation = call()
        except Exception as exc:
            raise ActionError(describe_error(exc)[0]) from exc
        errors = [e.message for e in operation.error.errors] if "error" in operation else []
        if errors:
            raise ActionError("; ".join(errors))
        status = getattr(operation.status, "name", operation.status)  # an enum in the SDK
        return {"operation": operation.name, "operation_status": str(status)}
