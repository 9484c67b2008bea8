"""Enforce mode on Azure: deallocate VMs, mark violations with a tag.

- `stop`: `virtualMachines.deallocate` (a VM stopped from inside the OS keeps its hardware and
  its bill; only deallocation stops the charge). A VM already deallocated or deallocating is
  skipped, and so is one that no longer exists (idempotent). The request returns once Azure
  accepts it (no waiting on the long-running operation); the audit log records the power state
  read back afterwards. First gpuwarden's stop mark is merged into the VM's tags (the way back,
  before the change): `gpuwarden:stopped-by` = `<policy>@<evaluation instant>` and
  `gpuwarden:resume-schedule` = the schedule it was stopped on.
- `resume` (planned when the mark's schedule is on): `virtualMachines.start` of a VM that still
  carries the mark and is deallocated (or stopped), then the mark's tags are deleted (Tags API,
  operation Delete). A VM deallocated by anyone else carries no mark and is never started.
- AKS node pool (`stop` and `resume`): a User pool is scaled to zero through the AgentPools API
  (read, then written back whole with `count` 0 and the autoscaler off), its size kept in the
  pool's tag `gpuwarden:previous-size` ("min,max,count"; min and max 0 when it had no
  autoscaler) beside the stop mark; resume restores that size (and the autoscaler) and drops the
  three tags. A System pool cannot go to zero and is skipped.
- `mark-violation`: tag `gpuwarden:violation` = `<policy>@<yyyy-mm-dd>`, merged into the
  resource's tags through the Tags API (`Microsoft.Resources/tags`, operation Merge), so other
  tags are never rewritten and the Tag Contributor role is enough. Marks of several policies are
  kept comma-separated, and a policy already marked is left alone, so the date is that of the
  first mark. VMs and managed disks can be marked.

Each check reads the resource fresh, its tags included (Tags API), before anything is changed:
one that has become production or exempt since the listing is skipped
(`engine.core.labels.protection`; the subscription's tags from the listing stay the fallback). The
runner
(`remediations.runner`) supplies the blast radius, audit log and failure handling.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.core.labels import protection
from engine.core.model import Finding, Report, Resource
from engine.sources.azure import (
    DISK_KIND,
    LINUX_VM_KIND,
    NODE_POOL_KIND,
    WINDOWS_VM_KIND,
    ArmId,
    AzureClients,
    describe_error,
    parse_arm_id,
    plain,
    power_state,
)
from remediations.planning import RESUME_SCHEDULE_TAG, STOPPED_BY_TAG, resume_refusal, stop_marks
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
VIOLATION_TAG = "gpuwarden:violation"
VM_KINDS = frozenset({LINUX_VM_KIND, WINDOWS_VM_KIND})
MARKABLE_KINDS = VM_KINDS | {DISK_KIND}
ALREADY_DEALLOCATED = frozenset({"deallocated", "deallocating"})
RESUMABLE = frozenset({"deallocated", "stopped"})
PREVIOUS_SIZE_TAG = "gpuwarden:previous-size"
POOL_MARKS = (STOPPED_BY_TAG, RESUME_SCHEDULE_TAG, PREVIOUS_SIZE_TAG)
MAX_NODES = 5_000  # a larger recorded size is not trusted


class ActionError(Exception):
    """A failed API call, worded like the source's warnings (one line)."""


def apply_azure_remediations(
    report: Report,
    resources: list[Resource],
    clients: AzureClients,
    *,
    max_actions: int,
    audit_log: Path,
    actor: str | None = None,
    clock: Clock = utc_now,
    deadline: Deadline | None = None,
) -> Report:
    """The report with each planned Azure action applied (or skipped/failed), mode enforce."""
    actions = AzureActions(clients, clock, marked_at=report.generated_at)
    checks: dict[str, Check] = {STOP_ACTION: actions.stop, MARK_ACTION: actions.mark,
                                RESUME_ACTION: actions.resume}
    return run_enforcement(report, resources, provider="azure", checks=checks,
                           max_actions=max_actions, audit_log=audit_log, actor=actor,
                           clock=clock, deadline=deadline)


def _call(call: Callable[[], Any]) -> Any:
    """Make an API call; None when the resource is gone (404), ActionError on other failures."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        return call()
    except ResourceNotFoundError:
        return None
    except Exception as exc:
        raise ActionError(describe_error(exc)[0]) from exc


def _pool_size(pool: Any) -> dict[str, Any]:
    autoscaling = bool(pool.enable_auto_scaling)
    return {"count": int(pool.count or 0), "min": int(pool.min_count or 0) if autoscaling else 0,
            "max": int(pool.max_count or 0) if autoscaling else 0, "autoscaling": autoscaling}


def _parse_pool_size(text: str) -> tuple[int, int, int] | None:
    parts = text.split(",")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
        return None
    minimum, maximum, count = (min(int(part), MAX_NODES) for part in parts)
    return minimum, maximum, count


def _pool_request(resource: Resource, pool: Any) -> dict[str, Any]:
    """What is written, for the audit log: the pool's id and the fields changed."""
    return {"id": resource.id, "count": pool.count, "enableAutoScaling": pool.enable_auto_scaling,
            "minCount": pool.min_count, "maxCount": pool.max_count, "tags": dict(pool.tags or {})}


def _vm_params(ref: ArmId) -> dict[str, str]:
    return {"subscription": ref.subscription, "resourceGroup": ref.resource_group,
            "vmName": ref.name}


class AzureActions:
    """The checks for each action; each reads fresh state and returns what to do."""

    def __init__(self, clients: AzureClients, clock: Clock, *,
                 marked_at: datetime | None = None) -> None:
        self.clients = clients
        self.clock = clock
        self.marked_at = marked_at  # the evaluation instant (`--now`), written in stop marks

    def _tags(self, ref: ArmId, resource_id: str) -> dict[str, str] | None:
        """The resource's tags now (Tags API); None when it no longer exists."""
        tags_api = self.clients.resources(ref.subscription).tags
        found = _call(lambda: tags_api.get_at_scope(resource_id))
        if found is None:
            return None
        tags = (plain(found).get("properties") or {}).get("tags") or {}
        return {str(key): str(value) for key, value in tags.items()}

    # stop ----------------------------------------------------------------------------------

    def _power(self, ref: ArmId) -> tuple[bool, str | None]:
        """(whether the VM exists, its power state)."""
        machines = self.clients.compute(ref.subscription).virtual_machines
        view = _call(lambda: machines.instance_view(ref.resource_group, ref.name))
        if view is None:
            return False, None
        return True, power_state({"properties": {"instanceView": plain(view)}})

    def stop(self, finding: Finding, resource: Resource) -> Change | NoChange:
        if resource.kind == NODE_POOL_KIND:
            return self._scale_pool(finding, resource)
        ref = parse_arm_id(resource.id) if resource.kind in VM_KINDS else None
        if ref is None:
            return NoChange(f"no stop action for a {resource.kind}")
        exists, power = self._power(ref)
        if not exists:
            return NoChange(f"{resource.id} no longer exists")
        before = {"power_state": power}
        tags = self._tags(ref, resource.id)
        if tags is None:
            return NoChange(f"{resource.id} no longer exists", before)
        protected = protection(finding.policy, tags, fallback=resource.namespace_labels)
        if protected:
            return NoChange(protected, before)
        if power in ALREADY_DEALLOCATED:
            return NoChange(f"{resource.id} is already {power}", before)
        machines = self.clients.compute(ref.subscription).virtual_machines
        marks = self._stop_marks(finding)

        def apply() -> dict[str, Any]:
            self._update_tags(ref, resource.id, "Merge", marks)  # the way back, first
            if _call(lambda: machines.begin_deallocate(ref.resource_group, ref.name,
                                                       polling=False)) is None:
                raise ActionError(f"{resource.id} no longer exists")
            return self._power_after(ref)

        request = {"tags.updateAtScope": {"scope": resource.id, "operation": "Merge",
                                          "properties": {"tags": marks}},
                   "virtualMachines.deallocate": _vm_params(ref)}
        return Change(before, request, apply,
                      f"deallocated {resource.id} (was {power or 'in an unknown power state'})")

    def resume(self, finding: Finding, resource: Resource) -> Change | NoChange:
        """Start a VM gpuwarden deallocated (its mark still on it), then delete the mark."""
        if resource.kind == NODE_POOL_KIND:
            return self._resume_pool(resource)
        ref = parse_arm_id(resource.id) if resource.kind in VM_KINDS else None
        if ref is None:
            return NoChange(f"no resume action for a {resource.kind}")
        exists, power = self._power(ref)
        tags = self._tags(ref, resource.id) if exists else None
        if tags is None:
            return NoChange(f"{resource.id} no longer exists")
        before = {"power_state": power}
        if STOPPED_BY_TAG not in tags:
            return NoChange(f"{resource.id} carries no {STOPPED_BY_TAG} mark", before)
        if power not in RESUMABLE:
            return NoChange(f"{resource.id} is {power or 'in an unknown power state'}, not "
                            "deallocated", before)
        machines = self.clients.compute(ref.subscription).virtual_machines
        marks = {key: tags[key] for key in (STOPPED_BY_TAG, RESUME_SCHEDULE_TAG) if key in tags}

        def apply() -> dict[str, Any]:
            if _call(lambda: machines.begin_start(ref.resource_group, ref.name,
                                                  polling=False)) is None:
                raise ActionError(f"{resource.id} no longer exists")
            self._update_tags(ref, resource.id, "Delete", marks)
            return self._power_after(ref)

        request = {"virtualMachines.start": _vm_params(ref),
                   "tags.updateAtScope": {"scope": resource.id, "operation": "Delete",
                                          "properties": {"tags": marks}}}
        return Change(before, request, apply,
                      f"started {resource.id} (was {power}, deallocated by gpuwarden)")

    # AKS node pools ------------------------------------------------------------------------

    def _pool(self, resource: Resource) -> tuple[Any, Callable[[Any], Any]] | None:
        """(the agent pool as read now, a function writing it back whole); None when gone."""
        cluster_id, _, name = resource.id.rpartition("/agentPools/")
        ref = parse_arm_id(cluster_id)
        if ref is None or not name:
            return None
        pools = self.clients.containers(ref.subscription).agent_pools
        pool = _call(lambda: pools.get(ref.resource_group, ref.name, name))
        if pool is None:
            return None

        def write(body: Any) -> Any:
            return _call(lambda: pools.begin_create_or_update(ref.resource_group, ref.name,
                                                              name, body, polling=False))

        return pool, write

    def _scale_pool(self, finding: Finding, resource: Resource) -> Change | NoChange:
        found = self._pool(resource)
        if found is None:
            return NoChange(f"{resource.id} no longer exists")
        pool, write = found
        before = _pool_size(pool)
        tags = {str(k): str(v) for k, v in (pool.tags or {}).items()}
        protected = protection(finding.policy, {**resource.tags, **tags},
                               fallback=resource.namespace_labels)
        if protected:
            return NoChange(protected, before)
        if str(getattr(pool.mode, "value", pool.mode)).lower() == "system":
            return NoChange(f"{resource.id} is a System node pool: it cannot scale to zero",
                            before)
        if before["count"] == 0:
            return NoChange(f"{resource.id} is already at zero", before)
        size = f"{before['min']},{before['max']},{before['count']}"
        pool.tags = {**tags, PREVIOUS_SIZE_TAG: size, **self._stop_marks(finding)}
        pool.count, pool.enable_auto_scaling, pool.min_count, pool.max_count = 0, False, None, None

        def apply() -> dict[str, Any]:
            if write(pool) is None:
                raise ActionError(f"{resource.id} no longer exists")
            return {"count": 0}

        return Change(before, {"agentPools.createOrUpdate": _pool_request(resource, pool)},
                      apply, f"scaled node pool {resource.id} to zero (was {size} "
                      f"min,max,count; kept in tag {PREVIOUS_SIZE_TAG})")

    def _resume_pool(self, resource: Resource) -> Change | NoChange:
        found = self._pool(resource)
        if found is None:
            return NoChange(f"{resource.id} no longer exists")
        pool, write = found
        before = _pool_size(pool)
        tags = {str(k): str(v) for k, v in (pool.tags or {}).items()}
        previous = _parse_pool_size(tags.get(PREVIOUS_SIZE_TAG, ""))
        refused = resume_refusal(resource.id, STOPPED_BY_TAG,
                                 marked=STOPPED_BY_TAG in tags and previous is not None,
                                 at_zero=before["count"] == 0)
        if refused:
            return NoChange(refused, before)
        assert previous is not None  # marked: its size was readable
        minimum, maximum, count = previous
        pool.tags = {key: value for key, value in tags.items() if key not in POOL_MARKS}
        pool.count = count
        if maximum > 0:
            pool.enable_auto_scaling, pool.min_count, pool.max_count = True, minimum, maximum

        def apply() -> dict[str, Any]:
            if write(pool) is None:
                raise ActionError(f"{resource.id} no longer exists")
            return {"count": count, "min": minimum, "max": maximum}

        return Change(before, {"agentPools.createOrUpdate": _pool_request(resource, pool)},
                      apply, f"restored node pool {resource.id} to {minimum},{maximum},{count}"
                      " min,max,count")

    def _stop_marks(self, finding: Finding) -> dict[str, str]:
        return stop_marks(finding, self.marked_at or self.clock())

    def _update_tags(self, ref: ArmId, resource_id: str, operation: str,
                     tags: dict[str, str]) -> None:
        tags_api = self.clients.resources(ref.subscription).tags
        body = {"operation": operation, "properties": {"tags": tags}}
        if _call(lambda: tags_api.begin_update_at_scope(resource_id, body,
                                                        polling=False)) is None:
            raise ActionError(f"{resource_id} no longer exists")

    def _power_after(self, ref: ArmId) -> dict[str, Any]:
        try:
            return {"power_state": self._power(ref)[1]}
        except ActionError:
            return {"power_state": None}  # accepted; the read-back is only for the record

    # mark-violation --------------------------------------------------------------------------

    def mark(self, finding: Finding, resource: Resource) -> Change | NoChange:
        ref = parse_arm_id(resource.id) if resource.kind in MARKABLE_KINDS else None
        if ref is None:
            return NoChange(f"no tagging action for a {resource.kind}")
        tags_api = self.clients.resources(ref.subscription).tags
        tags = self._tags(ref, resource.id)
        if tags is None:
            return NoChange(f"{resource.id} no longer exists")
        current = tags.get(VIOLATION_TAG)
        marks = [m for m in str(current or "").split(",") if m]
        before = {VIOLATION_TAG: current}
        protected = protection(finding.policy, tags, fallback=resource.namespace_labels)
        if protected:
            return NoChange(protected, before)
        if any(m.split("@", 1)[0] == finding.policy for m in marks):
            return NoChange(f"{resource.id} is already marked for {finding.policy}", before)
        value = ",".join([*marks, f"{finding.policy}@{self.clock().date().isoformat()}"])
        body = {"operation": "Merge", "properties": {"tags": {VIOLATION_TAG: value}}}

        def apply() -> dict[str, Any]:
            poller = _call(lambda: tags_api.begin_update_at_scope(resource.id, body,
                                                                  polling=False))
            if poller is None:
                raise ActionError(f"{resource.id} no longer exists")
            merged = plain(poller.result())
            return {VIOLATION_TAG: ((merged.get("properties") or {}).get("tags") or {}).get(
                VIOLATION_TAG)}

        return Change(before, {"tags.updateAtScope": {"scope": resource.id, **body}}, apply,
                      f"tagged {resource.id} {VIOLATION_TAG}={value}")
