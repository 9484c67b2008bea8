"""Reading GKE: every cluster of a project in every location (`projects.locations.clusters.list`
with location `-`), node pools inline, and each pool's current size: the sum of the target sizes
of its managed instance groups (`instanceGroupManagers.get`; the GKE API itself records only the
pool's initial size). The size read is kept on the pool as `gpuwardenNodeCount` (a field of
gpuwarden's, not the API's), so a snapshot replays it.

A project whose clusters cannot be listed (GKE not enabled, no permission) is a warning, not a
failed project: its instances and disks are still scanned.
"""

from __future__ import annotations

import re
from typing import Any

from engine.sources.gcp.clients import GcpClients
from engine.sources.gcp.failures import describe_error

NODE_COUNT_FIELD = "gpuwardenNodeCount"
SCAN_PERMISSIONS = ("container.clusters.list", "compute.instanceGroupManagers.get")
MAX_CLUSTERS = 2_000  # per project
MAX_POOLS = 200  # per cluster
MAX_GROUPS = 100  # instance groups per pool (one per zone)
_GROUP_URL = re.compile(r"/projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/"
                        r"instanceGroup(?:Manager)?s/(?P<name>[^/]+)$")


def list_clusters(clients: GcpClients, project_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The project's clusters as the API serves them (pools sized), and warnings."""
    if clients.container is None:
        return [], []
    try:
        answer = clients.container.get(f"projects/{project_id}/locations/-/clusters")
    except Exception as exc:
        message, _ = describe_error(exc)
        return [], [f"gcp: project {project_id}: GKE clusters not listed: {message}"]
    warnings = [f"gcp: project {project_id}: GKE location {zone} did not answer"
                for zone in (answer.get("missingZones") or [])[:20] if isinstance(zone, str)]
    clusters = [c for c in (answer.get("clusters") or [])[:MAX_CLUSTERS] if isinstance(c, dict)]
    for cluster in clusters:
        pools = cluster.get("nodePools")
        cluster["nodePools"] = [p for p in pools[:MAX_POOLS] if isinstance(p, dict)] \
            if isinstance(pools, list) else []
        for pool in cluster["nodePools"]:
            warnings.extend(_size_pool(clients, project_id, pool))
    return clusters, warnings


def _size_pool(clients: GcpClients, project_id: str, pool: dict[str, Any]) -> list[str]:
    """Set the pool's NODE_COUNT_FIELD from its instance groups; a warning when unreadable
    (the normalizer then counts its configured size)."""
    try:
        sizes = group_sizes(clients, pool)
    except Exception as exc:
        message, _ = describe_error(exc)
        return [f"gcp: project {project_id}: node pool {pool.get('name')}: size not read: "
                f"{message}"]
    if sizes is not None:
        pool[NODE_COUNT_FIELD] = sum(sizes)
    return []


def group_sizes(clients: GcpClients, pool: dict[str, Any]) -> list[int] | None:
    """The target size of each of the pool's managed instance groups (one per zone); None when
    it names none, or one that is not a zonal group URL."""
    urls = pool.get("instanceGroupUrls")
    if not isinstance(urls, list) or not urls:
        return None
    refs = [_GROUP_URL.search(str(url)) for url in urls[:MAX_GROUPS]]
    sizes: list[int] = []
    for found in refs:
        if found is None:
            return None
        manager = clients.group_managers.get(
            project=found.group("project"), zone=found.group("zone"),
            instance_group_manager=found.group("name"), retry=clients.retry)
        sizes.append(max(0, int(manager.target_size or 0)))
    return sizes
