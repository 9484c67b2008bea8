"""Snapshot section `kubernetes: {cluster, objects: [...]}`: the objects as the API serves them,
read into a `ClusterState` and normalized like a live cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.sources.kubernetes.cluster import ClusterState, cluster_resources
from engine.sources.sections import Labels, ObjectShape, SnapshotContext, check_shape, section


class _KubernetesMetadata(ObjectShape):
    name: str | None = None
    namespace: str | None = None
    labels: Labels | None = None
    annotations: Labels | None = None


class _KubernetesObject(ObjectShape):
    apiVersion: str | None = None
    kind: str | None = None
    metadata: _KubernetesMetadata | None = None
    spec: dict[str, Any] | None = None


@section("kubernetes")
def _kubernetes(value: Any, ctx: SnapshotContext) -> list[Resource]:
    if not isinstance(value, Mapping) or not isinstance(value.get("objects", []), list):
        raise InputError("kubernetes must be a mapping with an 'objects' list", file=ctx.file)
    for index, obj in enumerate(value.get("objects", [])):
        if isinstance(obj, Mapping):
            check_shape(_KubernetesObject, obj, f"kubernetes.objects[{index}]", ctx.file)
    objects = [dict(obj) for obj in value.get("objects", []) if isinstance(obj, Mapping)]
    cluster = value.get("cluster")
    state = ClusterState(
        cluster=str(cluster) if cluster else None,
        namespaces=[obj for obj in objects if obj.get("kind") == "Namespace"],
        nodes=[obj for obj in objects if obj.get("kind") == "Node"],
        workloads=[obj for obj in objects if obj.get("kind") not in ("Namespace", "Node")],
    )
    return cluster_resources(state, ctx.catalog)
