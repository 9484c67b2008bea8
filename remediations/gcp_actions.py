"""Enforce mode on Google Cloud: stop Compute Engine instances, mark violations with a label.

- `stop`: `instances.stop`; an instance already TERMINATED, STOPPED, STOPPING, SUSPENDED or
  SUSPENDING is skipped, and so is one that no longer exists (idempotent). The call returns as
  soon as Compute Engine accepts the operation; the audit log records its name and status.
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
from pathlib import Path
from typing import Any

from engine.core.labels import protection
from engine.core.model import Finding, Report, Resource
from engine.sources.gcp import GcpClients, describe_error
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
VIOLATION_LABEL = "gpuwarden-violation"
INSTANCE_KIND = "google_compute_instance"
ALREADY_STOPPED = frozenset({"STOPPING", "STOPPED", "TERMINATED", "SUSPENDING", "SUSPENDED"})
_INSTANCE_PATH = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/"
                            r"(?P<instance>[^/]+)$")
_LABEL_VALUE_INVALID = re.compile(r"[^a-z0-9_-]")


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
    actions = GcpActions(clients, clock)
    checks: dict[str, Check] = {STOP_ACTION: actions.stop, MARK_ACTION: actions.mark}
    return run_enforcement(report, resources, provider="gcp", checks=checks,
                           max_actions=max_actions, audit_log=audit_log, actor=actor,
                           clock=clock, deadline=deadline)


def _protection(finding: Finding, resource: Resource, current: Any) -> str | None:
    return protection(finding.policy, dict(current.labels), fallback=resource.namespace_labels)


class GcpActions:
    """The checks for each action; each reads fresh state and returns what to do."""

    def __init__(self, clients: GcpClients, clock: Clock) -> None:
        self.clients = clients
        self.clock = clock

    def _read(self, ref: InstanceRef) -> Any | None:
        """The instance as it is now; None when it no longer exists."""
        from google.api_core.exceptions import NotFound

        try:
            return self.clients.instances.get(**ref.params(), retry=self.clients.retry)
        except NotFound:
            return None
        except Exception as exc:
            raise ActionError(describe_error(exc)[0]) from exc

    def stop(self, finding: Finding, resource: Resource) -> Change | NoChange:
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

        def apply() -> dict[str, Any]:
            return self._operation(lambda: self.clients.instances.stop_unary(**ref.params()))

        return Change(before, {"instances.stop": ref.params()}, apply,
                      f"stopped {ref.path} (was {current.status})")

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
