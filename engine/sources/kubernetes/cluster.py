"""A listed cluster (`ClusterState`: namespaces, nodes, workloads, NetworkPolicies as plain dicts)
normalized into workload resources with their namespace labels and node facts, and saved as the
`kubernetes:` section of a snapshot bundle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Capacity, Resource, State
from engine.sources.kubernetes.dra import claim_index
from engine.sources.kubernetes.gpu_models import GPU_PRODUCT_LABEL
from engine.sources.kubernetes.manifests import namespace_resource
from engine.sources.kubernetes.placement import workload_capacity
from engine.sources.kubernetes.training_jobs import TRAINING_JOB_KINDS
from engine.sources.kubernetes.workloads import workload_resource

NETWORK_POLICY = "NetworkPolicy"
NETWORK_POLICY_LIST = "NetworkPolicyList"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the audit needs from a Node: its GPU model label and capacity type."""

    name: str
    gpu_product: str | None
    capacity: Capacity
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ClusterState:
    """A cluster as listed: plain-dict objects, ready to normalize or to save in a snapshot."""

    cluster: str | None = None
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    workloads: list[dict[str, Any]] = field(default_factory=list)
    # None: NetworkPolicies were not listed (not permitted, or an older snapshot)
    network_policies: list[dict[str, Any]] | None = None

    def node_info(self) -> dict[str, NodeInfo]:
        return {info.name: info for info in map(node_info, self.nodes) if info.name}

    def network_policy_counts(self) -> dict[str, int] | None:
        """NetworkPolicies per namespace; None when they were not listed.

        A snapshot passes every object that is not a Namespace or Node as a workload, so
        NetworkPolicies (and a `NetworkPolicyList`, which says they were listed even when it is
        empty) are also looked for there.
        """
        listed = self.network_policies
        extra = [o for o in self.workloads if o.get("kind") in (NETWORK_POLICY,
                                                                   NETWORK_POLICY_LIST)]
        if listed is None and not extra:
            return None
        counts: dict[str, int] = {}
        for obj in [*(listed or []), *extra]:
            items = obj.get("items") if obj.get("kind") == NETWORK_POLICY_LIST else [obj]
            for item in items if isinstance(items, list) else []:
                namespace = (item.get("metadata") or {}).get("namespace") if isinstance(
                    item, Mapping) else None
                if isinstance(namespace, str) and namespace:
                    counts[namespace] = counts.get(namespace, 0) + 1
        return counts


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    metadata = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    # A node's labels read as a nodeSelector say whether pods on it run on spot capacity.
    capacity = workload_capacity({"nodeSelector": labels})
    return NodeInfo(name=str(metadata.get("name") or ""), gpu_product=labels.get(GPU_PRODUCT_LABEL),
                    capacity=capacity, labels=labels)


def cluster_resources(state: ClusterState, catalog: Catalog | None = None) -> list[Resource]:
    """The workload resources of a listed cluster, with namespace labels and node capacity."""
    namespaces = dict(namespace_resource(ns) for ns in state.namespaces)
    nodes = state.node_info()
    policies = state.network_policy_counts()
    claims = claim_index(state.workloads)
    found: list[Resource] = []
    for obj in state.workloads:
        namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        node = nodes.get(str((obj.get("spec") or {}).get("nodeName") or "")) \
            if obj.get("kind") == "Pod" else None
        resource = workload_resource(
            obj, namespaces.get(namespace, {}), catalog=catalog, state=_workload_state(obj),
            cluster=state.cluster, node_capacity=node.capacity if node else None,
            node_labels=node.labels if node else None,
            namespace_network_policies=None if policies is None else policies.get(namespace, 0),
            claims=claims,
        )
        if resource is not None:
            found.append(resource)
    return found


def _workload_state(obj: dict[str, Any]) -> State:
    """STOPPED for a controller scaled to zero or a suspended CronJob, else RUNNING."""
    spec = obj.get("spec") or {}
    if obj.get("kind") in ("Deployment", "StatefulSet") and spec.get("replicas") == 0:
        return State.STOPPED
    if obj.get("kind") == "CronJob" and spec.get("suspend") is True:
        return State.STOPPED
    if obj.get("kind") in TRAINING_JOB_KINDS and True in (
            spec.get("suspend"), (spec.get("runPolicy") or {}).get("suspend")):
        return State.STOPPED  # queued by Kueue, or suspended by hand
    return State.RUNNING


def kubernetes_snapshot(state: ClusterState) -> dict[str, Any]:
    """The `kubernetes:` section of a snapshot bundle holding this cluster's objects."""
    objects = [*state.namespaces, *state.nodes, *state.workloads]
    if state.network_policies is not None:
        # As a list object, so that "listed, and there were none" survives the round trip.
        objects.append({"apiVersion": "networking.k8s.io/v1", "kind": NETWORK_POLICY_LIST,
                        "items": state.network_policies})
    section: dict[str, Any] = {"objects": objects}
    if state.cluster:
        section = {"cluster": state.cluster, **section}
    return section
