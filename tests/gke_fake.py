"""The GKE part of the loopback Google Cloud server of tests/test_gcp_source.py: the container API
v1 (clusters.list over all locations with node pools inline, clusters.get, nodePools.get / update /
setSize / setAutoscaling, operations.get) and Compute Engine's instanceGroupManagers.get, which
holds a pool's real size. Objects are the API's JSON (camelCase; int64 fields as strings).

Like GKE, a cluster runs one operation at a time: a mutating call while the last operation has
not been read back DONE answers 400 FAILED_PRECONDITION, so an executor that does not wait fails.
`nodePools.update` must name the pool's own node version and image type (a different one would
be an upgrade).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from google.cloud import compute_v1

COMPUTE = "https://www.googleapis.com/compute/v1"


@dataclass
class GkeState:
    clusters: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by project
    group_sizes: dict[str, int] = field(default_factory=dict)  # "P/Z/name" → targetSize
    busy: dict[str, str] = field(default_factory=dict)  # cluster path → running operation
    forbidden: set[str] = field(default_factory=set)  # projects whose clusters.list is 403
    operations: int = 0

    def pool(self, project: str, location: str, cluster: str, name: str
             ) -> dict[str, Any] | None:
        for found in self.clusters.get(project, []):
            if found["name"] == cluster and found["location"] == location:
                for pool in found.get("nodePools", []):
                    if pool["name"] == name:
                        return pool
        return None

    def nodes(self, pool: dict[str, Any]) -> list[int]:
        return [self.group_sizes[_group_key(url)] for url in pool.get("instanceGroupUrls", [])]


def _group_key(url: str) -> str:
    parts = url.split("/projects/", 1)[1].split("/")  # P/zones/Z/instanceGroupManagers/N
    return f"{parts[0]}/{parts[2]}/{parts[4]}"


def add_cluster(state: GkeState, project: str, name: str, location: str, zones: list[str],
                pools: list[dict[str, Any]], labels: dict[str, str] | None = None,
                autopilot: bool = False) -> None:
    """A cluster; each pool's `nodes` (per zone) become its instance groups' target sizes."""
    cluster: dict[str, Any] = {
        "name": name, "location": location, "locations": zones, "status": "RUNNING",
        "resourceLabels": labels or {}, "currentMasterVersion": "1.30.5-gke.1014001",
        "autopilot": {"enabled": autopilot},
        "selfLink": f"https://container.googleapis.com/v1/projects/{project}/locations/"
                    f"{location}/clusters/{name}", "nodePools": []}
    for spec in pools:
        pool = {key: value for key, value in spec.items() if key != "nodes"}
        pool.setdefault("version", "1.30.5-gke.1014001")
        pool.setdefault("status", "RUNNING")
        pool["config"] = {"imageType": "COS_CONTAINERD", "diskSizeGb": 100, **pool["config"]}
        pool["instanceGroupUrls"] = []
        for zone in zones:
            group = f"gke-{name}-{pool['name']}-{zone[-1]}-grp"
            pool["instanceGroupUrls"].append(
                f"{COMPUTE}/projects/{project}/zones/{zone}/instanceGroupManagers/{group}")
            state.group_sizes[f"{project}/{zone}/{group}"] = spec["nodes"]
        cluster["nodePools"].append(pool)
    state.clusters.setdefault(project, []).append(cluster)


class GkeRoutes:
    """Answers GKE paths through the server's handler (`handler._send`, `api.requests`)."""

    def __init__(self, handler: Any, state: GkeState, body: Any) -> None:
        self.handler, self.state, self.body = handler, state, body

    def error(self, code: int, status: str, message: str) -> None:
        self.handler._send(code, {"error": {"code": code, "message": message, "status": status}})

    def group_manager(self, project: str, zone: str, name: str) -> None:
        size = self.state.group_sizes.get(f"{project}/{zone}/{name}")
        if size is None:
            return self.error(404, "NOT_FOUND", f"instanceGroupManagers/{name} not found")
        manager = compute_v1.InstanceGroupManager(
            name=name, target_size=size, zone=f"{COMPUTE}/projects/{project}/zones/{zone}",
            self_link=f"{COMPUTE}/projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
        return self.handler._send(200, compute_v1.InstanceGroupManager.to_json(manager))

    def route(self, parts: list[str]) -> None:
        """`v1/projects/P/locations/L/...`."""
        if len(parts) < 5 or parts[:2] != ["v1", "projects"] or parts[3] != "locations":
            return self.error(404, "NOT_FOUND", "no such path")
        project, location, rest = parts[2], parts[4], parts[5:]
        if rest == ["clusters"] and self.handler.command == "GET":
            return self._list(project, location)
        if len(rest) == 2 and rest[0] == "clusters" and self.handler.command == "GET":
            return self._cluster(project, location, rest[1])
        if len(rest) == 2 and rest[0] == "operations":
            return self._operation_get(rest[1])
        if len(rest) == 4 and rest[0] == "clusters" and rest[2] == "nodePools":
            name, _, verb = rest[3].partition(":")
            return self._pool(project, location, rest[1], name, verb)
        return self.error(404, "NOT_FOUND", "no such path")

    def _list(self, project: str, location: str) -> None:
        if project in self.state.forbidden:
            return self.error(403, "PERMISSION_DENIED", "Required 'container.clusters.list' "
                              f"permission for 'projects/{project}'")
        clusters = [c for c in self.state.clusters.get(project, [])
                    if location in ("-", c["location"])]
        return self.handler._send(200, {"clusters": copy.deepcopy(clusters)})

    def _cluster(self, project: str, location: str, name: str) -> None:
        for cluster in self.state.clusters.get(project, []):
            if cluster["name"] == name and cluster["location"] == location:
                return self.handler._send(200, copy.deepcopy(cluster))
        return self.error(404, "NOT_FOUND", f"Not found: cluster {name}")

    def _operation_get(self, name: str) -> None:
        for cluster, running in list(self.state.busy.items()):
            if running == name:
                del self.state.busy[cluster]
        return self.handler._send(200, {"name": name, "status": "DONE"})

    def _pool(self, project: str, location: str, cluster: str, name: str, verb: str) -> None:
        pool = self.state.pool(project, location, cluster, name)
        if pool is None:
            return self.error(404, "NOT_FOUND", f"Not found: node pool {name}")
        if self.handler.command == "GET" and not verb:
            return self.handler._send(200, copy.deepcopy(pool))
        key = f"{project}/{location}/{cluster}"
        if key in self.state.busy:
            return self.error(400, "FAILED_PRECONDITION", f"Cluster is running incompatible "
                              f"operation {self.state.busy[key]}.")
        body = self.body or {}
        changed = self._mutate(pool, verb, body)
        if changed is not None:
            return self.error(400, "INVALID_ARGUMENT", changed)
        self.state.operations += 1
        operation = f"operation-{self.state.operations}-{verb or 'update'}"
        self.state.busy[key] = operation
        return self.handler._send(200, {"name": operation, "status": "RUNNING",
                                        "operationType": verb.upper() or "UPDATE_NODE_POOL"})

    def _mutate(self, pool: dict[str, Any], verb: str, body: dict[str, Any]) -> str | None:
        """Apply a mutating call; the error message when it is refused."""
        if self.handler.command == "PUT" and not verb:
            if body.get("nodeVersion") != pool["version"] or \
                    body.get("imageType") != pool["config"]["imageType"]:
                return "nodeVersion and imageType must be the pool's own"
            pool["config"]["resourceLabels"] = dict((body.get("resourceLabels") or {})
                                                    .get("labels") or {})
            return None
        if self.handler.command == "POST" and verb == "setSize":
            for url in pool["instanceGroupUrls"]:
                self.state.group_sizes[_group_key(url)] = int(body["nodeCount"])
            return None
        if self.handler.command == "POST" and verb == "setAutoscaling":
            pool["autoscaling"] = json.loads(json.dumps(body.get("autoscaling") or {}))
            return None
        return f"unsupported {self.handler.command} {verb}"
