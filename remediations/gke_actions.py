"""Enforce mode on GKE node pools: scale to zero at off-hours, restore at on-hours.

- `stop`: the pool is read fresh (its resource labels, autoscaling, and the target sizes of its
  instance groups), and its cluster (labels; an Autopilot cluster's pools are left to GKE).
  First its resource labels get gpuwarden's stop mark and the size to come back to
  (`nodePools.update`: the way back before the change), then the autoscaler is turned off
  (`setAutoscaling`, when on) and the pool set to zero nodes (`setSize`). The size label
  `gpuwarden-previous-size` is `<mode>_<min>_<max>_<count>`: mode `fixed` (no autoscaler),
  `zone` (per-zone limits) or `total` (total limits); count is nodes per zone, as `setSize` and
  `initialNodeCount` count them (the largest zone's, when an autoscaler left them uneven). A
  pool already at zero is skipped.
- `resume`: only a pool still at zero that carries both the stop mark and a readable size:
  `setSize` to the recorded count, the autoscaler back with its limits, then the three labels
  removed. A pool scaled to zero by anyone else carries no mark and stays at zero.

GKE runs one operation per cluster at a time, so each call's operation is waited for before the
next (`ContainerApi.wait`). `nodePools.update` must name the pool's node version and image type:
the pool's own are sent, so nothing but the labels changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.core.labels import protection
from engine.core.model import Finding, Resource
from engine.sources.gcp import GcpClients, describe_error
from engine.sources.gcp.gke_readers import group_sizes
from remediations.planning import RESUME_SCHEDULE_LABEL, STOPPED_BY_LABEL
from remediations.runner import Change, NoChange

NODE_POOL_KIND = "google_container_node_pool"
PREVIOUS_SIZE_LABEL = "gpuwarden-previous-size"
POOL_MARKS = (STOPPED_BY_LABEL, RESUME_SCHEDULE_LABEL, PREVIOUS_SIZE_LABEL)
MAX_NODES = 5_000  # per zone; a larger recorded size is not trusted
# GKE authorizes node pool calls with its cluster permissions (docs/gcp-azure.md#permissions)
ENFORCE_PERMISSIONS = ("container.clusters.get", "container.clusters.update",
                       "container.operations.get", "compute.instanceGroupManagers.get")
_POOL_PATH = re.compile(r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/clusters/"
                        r"(?P<cluster>[^/]+)/nodePools/(?P<pool>[^/]+)$")
_SIZE = re.compile(r"^(?P<mode>fixed|zone|total)_(?P<min>\d{1,5})_(?P<max>\d{1,5})_"
                   r"(?P<count>\d{1,5})$")


class PoolActionError(Exception):
    """A failed GKE call, in one line."""


@dataclass(frozen=True, slots=True)
class PoolSize:
    mode: str  # fixed | zone | total
    minimum: int
    maximum: int
    count: int  # nodes per zone

    @property
    def label(self) -> str:
        return f"{self.mode}_{self.minimum}_{self.maximum}_{self.count}"

    def autoscaling(self) -> dict[str, Any]:
        """The pool's autoscaling as `setAutoscaling` takes it."""
        if self.mode == "zone":
            return {"enabled": True, "minNodeCount": self.minimum, "maxNodeCount": self.maximum}
        if self.mode == "total":
            return {"enabled": True, "totalMinNodeCount": self.minimum,
                    "totalMaxNodeCount": self.maximum}
        return {"enabled": False}


def parse_size(text: str) -> PoolSize | None:
    found = _SIZE.match(text)
    if found is None:
        return None
    minimum, maximum, count = (min(int(found.group(k)), MAX_NODES) for k in ("min", "max",
                                                                            "count"))
    return PoolSize(found.group("mode"), minimum, maximum, count)


def current_size(pool: Mapping[str, Any], per_zone: int) -> PoolSize:
    autoscaling = pool.get("autoscaling") or {}
    if not autoscaling.get("enabled"):
        return PoolSize("fixed", 0, 0, per_zone)
    if autoscaling.get("totalMaxNodeCount"):
        return PoolSize("total", int(autoscaling.get("totalMinNodeCount") or 0),
                        int(autoscaling.get("totalMaxNodeCount") or 0), per_zone)
    return PoolSize("zone", int(autoscaling.get("minNodeCount") or 0),
                    int(autoscaling.get("maxNodeCount") or 0), per_zone)


@dataclass(frozen=True, slots=True)
class PoolRef:
    project: str
    location: str
    cluster: str
    pool: str

    @property
    def path(self) -> str:
        return f"{self.location_path}/clusters/{self.cluster}/nodePools/{self.pool}"

    @property
    def location_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}"


def pool_ref(resource: Resource) -> PoolRef | None:
    found = _POOL_PATH.match(resource.id) if resource.kind == NODE_POOL_KIND else None
    if found is None:
        return None
    return PoolRef(found.group("project"), found.group("location"), found.group("cluster"),
                   found.group("pool"))


def _unfinished_stop(labels: Mapping[str, str]) -> PoolSize | None:
    """The size an earlier stop recorded and did not finish (its autoscaler may already be
    off): that one is kept, so the way back is the size before gpuwarden first acted."""
    return parse_size(labels.get(PREVIOUS_SIZE_LABEL, "")) if STOPPED_BY_LABEL in labels \
        else None


def _resource_labels(pool: Mapping[str, Any]) -> dict[str, str]:
    found = (pool.get("config") or {}).get("resourceLabels") or {}
    return {str(k): str(v) for k, v in found.items()}


class NodePoolActions:
    """The `stop` and `resume` checks for GKE node pools; each reads fresh state first."""

    def __init__(self, clients: GcpClients) -> None:
        self.clients = clients

    def stop(self, finding: Finding, resource: Resource, marks: dict[str, str]
             ) -> Change | NoChange:
        """Scale to zero, `marks` (the stop mark labels) and the size recorded first."""
        found = self._read(resource)
        if isinstance(found, NoChange):
            return found
        ref, pool, sizes = found
        labels = _resource_labels(pool)
        size = current_size(pool, max(sizes))
        before = {"nodes": sum(sizes), "size": size.label}
        cluster = self._cluster(ref)
        if (cluster.get("autopilot") or {}).get("enabled"):
            return NoChange(f"{ref.path}: GKE Autopilot manages its node pools", before)
        protected = protection(finding.policy, {
            **(cluster.get("resourceLabels") or {}),
            **((pool.get("config") or {}).get("labels") or {}), **labels},
            fallback=resource.namespace_labels)
        if protected:
            return NoChange(protected, before)
        if sum(sizes) == 0:
            return NoChange(f"{ref.path} is already at zero nodes", before)
        recorded = _unfinished_stop(labels) or size
        wanted = {**labels, **marks, PREVIOUS_SIZE_LABEL: recorded.label}

        def apply() -> dict[str, Any]:
            self._set_labels(ref, pool, wanted)  # the way back, first
            if size.mode != "fixed":
                self._post(ref, "setAutoscaling", {"autoscaling": {"enabled": False}})
            self._post(ref, "setSize", {"nodeCount": 0})
            return {"nodes": 0}

        request = {"nodePools.update": {"name": ref.path, "resourceLabels": wanted},
                   "nodePools.setAutoscaling": {"name": ref.path, "enabled": False}
                   if size.mode != "fixed" else None,
                   "nodePools.setSize": {"name": ref.path, "nodeCount": 0}}
        return Change(before, request, apply, f"scaled node pool {ref.path} to zero (was "
                      f"{sum(sizes)} nodes; kept in label {PREVIOUS_SIZE_LABEL}="
                      f"{recorded.label})")

    def resume(self, resource: Resource) -> Change | NoChange:
        """Restore the recorded size and autoscaler of a pool gpuwarden scaled to zero."""
        found = self._read(resource)
        if isinstance(found, NoChange):
            return found
        ref, pool, sizes = found
        labels = _resource_labels(pool)
        before = {"nodes": sum(sizes), "size": current_size(pool, max(sizes)).label}
        previous = parse_size(labels.get(PREVIOUS_SIZE_LABEL, ""))
        if STOPPED_BY_LABEL not in labels or previous is None:
            return NoChange(f"{ref.path} carries no {STOPPED_BY_LABEL} mark with its size",
                            before)
        if sum(sizes) != 0:
            return NoChange(f"{ref.path} is no longer at zero nodes", before)
        kept = {key: value for key, value in labels.items() if key not in POOL_MARKS}

        def apply() -> dict[str, Any]:
            self._post(ref, "setSize", {"nodeCount": previous.count})
            if previous.mode != "fixed":
                self._post(ref, "setAutoscaling", {"autoscaling": previous.autoscaling()})
            self._set_labels(ref, pool, kept)
            return {"nodes_per_zone": previous.count, "size": previous.label}

        request = {"nodePools.setSize": {"name": ref.path, "nodeCount": previous.count},
                   "nodePools.setAutoscaling": {"name": ref.path, **previous.autoscaling()}
                   if previous.mode != "fixed" else None,
                   "nodePools.update": {"name": ref.path, "remove": list(POOL_MARKS)}}
        return Change(before, request, apply, f"restored node pool {ref.path} to "
                      f"{previous.count} nodes per zone ({previous.label}), stopped by gpuwarden")

    def _read(self, resource: Resource
              ) -> tuple[PoolRef, dict[str, Any], list[int]] | NoChange:
        """(the pool's reference, the pool as read now, its instance groups' sizes)."""
        from google.api_core.exceptions import NotFound

        ref = pool_ref(resource)
        if ref is None:
            return NoChange(f"no node pool action for a {resource.kind}")
        try:
            pool = self.clients.container.get(ref.path)
            sizes = group_sizes(self.clients, pool)
        except NotFound:
            return NoChange(f"{ref.path} no longer exists")
        except Exception as exc:
            raise PoolActionError(describe_error(exc)[0]) from exc
        if not sizes:
            return NoChange(f"{ref.path} has no instance groups to size")
        return ref, pool, sizes

    def _cluster(self, ref: PoolRef) -> dict[str, Any]:
        """The pool's cluster as read now (its labels, whether it is Autopilot)."""
        try:
            cluster: dict[str, Any] = self.clients.container.get(
                f"{ref.location_path}/clusters/{ref.cluster}")
        except Exception as exc:
            raise PoolActionError(describe_error(exc)[0]) from exc
        return cluster

    def _set_labels(self, ref: PoolRef, pool: Mapping[str, Any], labels: dict[str, str]) -> None:
        config = pool.get("config") or {}
        self._wait(ref, lambda: self.clients.container.put(ref.path, {
            "nodeVersion": pool.get("version"), "imageType": config.get("imageType"),
            "resourceLabels": {"labels": labels}}))

    def _post(self, ref: PoolRef, verb: str, body: dict[str, Any]) -> None:
        self._wait(ref, lambda: self.clients.container.post(f"{ref.path}:{verb}", body))

    def _wait(self, ref: PoolRef, call: Any) -> None:
        try:
            self.clients.container.wait(call(), ref.location_path)
        except ValueError as exc:  # the operation failed, or ran too long
            raise PoolActionError(f"{ref.path}: {exc}") from exc
        except Exception as exc:
            raise PoolActionError(describe_error(exc)[0]) from exc
