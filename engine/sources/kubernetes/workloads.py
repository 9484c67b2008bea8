"""Workload resources of Pods and pod-template controllers (Deployment, StatefulSet, DaemonSet,
ReplicaSet, Job, CronJob), and of training-operator jobs through `training_jobs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, Category, Resource, State
from engine.sources.kubernetes.crd_kinds import kind_entry
from engine.sources.kubernetes.dra import ClaimIndex, pod_claims
from engine.sources.kubernetes.facts import PodGroup, workload_facts
from engine.sources.kubernetes.gpu_requests import gpu_spec
from engine.sources.kubernetes.node_pools import is_node_pool, node_pool_resource
from engine.sources.kubernetes.objects import (
    PROVIDER,
    as_mapping,
    as_text,
    controller_owner,
    count_field,
    dig,
    first_wins,
    string_keys,
    string_map,
)
from engine.sources.kubernetes.placement import workload_capacity
from engine.sources.kubernetes.training_jobs import pod_groups, training_job_resource
from engine.sources.kubernetes.unread_kinds import unread_kind_resource, with_unread_gpus

# Kinds whose pod spec lives at spec.template.spec (CronJob: spec.jobTemplate.spec.template.spec).
CONTROLLER_KINDS = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
)
_REPLICATED_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})


def workload_resource(
    obj: dict[str, Any],
    namespace_labels: Mapping[str, str] | None = None,
    *,
    catalog: Catalog | None = None,
    state: State = State.RUNNING,
    cluster: str | None = None,
    node_capacity: Capacity | None = None,
    node_labels: Mapping[str, str] | None = None,
    namespace_network_policies: int | None = None,
    claims: ClaimIndex | None = None,
) -> Resource | None:
    """The workload `Resource` of a Pod, a pod-template controller or a training-operator job
    (PyTorchJob, MPIJob, RayJob); None for other kinds.

    `state` is the caller's: PLANNED at admission, RUNNING for live objects. `node_capacity`
    and `node_labels` (of the node a running pod is on) override what the pod's selectors say;
    `namespace_network_policies` is how many NetworkPolicies its namespace has (None: not
    listed). `claims` holds the DRA ResourceClaim(Template)s known (`dra.claim_index`): a pod
    whose claim is not among them has an unknown GPU count. A Karpenter NodePool is a node
    group; any other kind that asks for accelerators is a resource whose GPUs are unknown.
    """
    if not isinstance(obj, dict):
        raise InputError(f"expected a Kubernetes object mapping, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    if is_node_pool(obj):
        return node_pool_resource(obj, catalog=catalog, state=state, cluster=cluster)
    if kind_entry(obj) is not None:
        groups = pod_groups(obj)
        if groups:
            return with_unread_gpus(obj, training_job_resource(
                obj, kind, groups, namespace_labels, catalog=catalog, state=state,
                cluster=cluster, node_labels=node_labels,
                namespace_network_policies=namespace_network_policies, claims=claims))
    template = pod_template(obj)
    if template is None:
        return unread_kind_resource(obj, namespace_labels, state=state, cluster=cluster)
    template_metadata, pod_spec = template
    metadata = as_mapping(obj.get("metadata"))
    namespace = as_text(metadata.get("namespace")) or "default"
    name = as_text(metadata.get("name")) or as_text(metadata.get("generateName")) or "<unnamed>"
    count, count_known = _replica_count(obj, kind)
    annotations = first_wins(metadata.get("annotations"), template_metadata.get("annotations"))
    gpu, gaps = gpu_spec(pod_spec, annotations, catalog, pod_claims(pod_spec, namespace, claims))
    unknown = set(gaps) if count_known else {*gaps, "count"}
    group = PodGroup(template_metadata, pod_spec, count, count_known)
    workload = workload_facts(obj, [group], annotations, node_labels=node_labels,
                              namespace_network_policies=namespace_network_policies)
    if workload.shared_gpu is None:
        unknown.add("workload.shared_gpu")

    return Resource(
        provider=PROVIDER,
        kind=kind,
        category=Category.WORKLOAD,
        id=f"{kind}/{namespace}/{name}",
        name=name,
        cluster=cluster,
        namespace=namespace,
        tags=first_wins(metadata.get("labels"), template_metadata.get("labels")),
        annotations=annotations,
        namespace_labels=string_map(namespace_labels),
        count=count,
        gpu=gpu,
        capacity=node_capacity or workload_capacity(pod_spec),
        state=state,
        owner=controller_owner(metadata),
        workload=workload,
        unknown=frozenset(unknown),
        raw=string_keys(obj),
    )


def pod_template_path(obj: dict[str, Any]) -> tuple[str, ...] | None:
    """Path to the object's pod spec (`("spec",)` for a Pod), or None if it has none."""
    kind = obj.get("kind")
    if kind == "Pod":
        return ("spec",)
    if kind == "CronJob":
        path: tuple[str, ...] = ("spec", "jobTemplate", "spec", "template", "spec")
    else:
        path = ("spec", "template", "spec")
    pod_spec = dig(obj, path)
    if kind in CONTROLLER_KINDS and isinstance(pod_spec, dict):
        return path
    # Custom resources (e.g. a training-operator job) are workloads when they hold a pod template.
    if isinstance(pod_spec, dict) and isinstance(pod_spec.get("containers"), list):
        return path
    return None


def pod_template(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(pod metadata, pod spec) of a workload object, or None if it is not a workload."""
    path = pod_template_path(obj)
    if path is None:
        return None
    template = as_mapping(dig(obj, path[:-1]))
    return as_mapping(template.get("metadata")), as_mapping(template.get("spec"))


def _replica_count(obj: dict[str, Any], kind: str) -> tuple[int, bool]:
    """(pods this workload stands for, whether that is known)."""
    spec = as_mapping(obj.get("spec"))
    if kind in _REPLICATED_KINDS:
        replicas, known = count_field(spec, "replicas")
        return (1 if replicas is None else replicas), known
    if kind == "Job":
        return _job_parallelism(spec)
    if kind == "CronJob":
        return _job_parallelism(as_mapping(as_mapping(spec.get("jobTemplate")).get("spec")))
    return 1, True  # a Pod, a DaemonSet (one per node: the node count is not ours to know)


def _job_parallelism(job_spec: dict[str, Any]) -> tuple[int, bool]:
    # A Job never runs more pods at once than it has completions.
    parallelism, parallelism_known = count_field(job_spec, "parallelism")
    completions, completions_known = count_field(job_spec, "completions")
    pods = 1 if parallelism is None else parallelism
    if completions is not None:
        pods = min(pods, completions)
    return pods, parallelism_known and completions_known
