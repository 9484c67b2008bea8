"""Kubernetes adapter: Pods and controller pod templates normalized into workload resources.

Input is plain dicts (YAML manifests, AdmissionReview objects, API list items); the `kubernetes`
client is never imported here. Everything a provider calls a field lives in this module: GPU
requests (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`), the GPU model a workload is pinned to
(`nvidia.com/gpu.product`), spot capacity labels per cloud, labels and annotations, and the
workload facts the queueing, sandboxing and checkpoint policies read (`WorkloadSpec`: runtime
class, scheduler, Kueue queue label, checkpoint annotation, persistent volume mounts, GPU
sharing). Training-operator jobs (PyTorchJob, MPIJob, RayJob) hold several pod templates; their
GPUs are summed over replica specs × replicas.

Objects are read defensively: a field of the wrong type is treated as absent, and a GPU quantity
that cannot be read marks the GPU spec unknown instead of failing, so a webhook never crashes on
what the API server let through.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from engine.catalog import Catalog, builtin_catalog
from engine.errors import InputError
from engine.model import Capacity, Category, GpuSpec, Resource, State, WorkloadSpec

PROVIDER = "kubernetes"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU (GPU feature discovery)
GPU_MEMORY_ANNOTATION = "gpuwarden.io/gpu-memory"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CHECKPOINT_ANNOTATION = "gpuwarden.io/checkpoint"
# Time-slicing with renameByDefault: the device plugin advertises shared GPUs under this name.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU feature discovery: > 1 when shared
MAX_LABEL_VALUE_CHARS = 63  # Kubernetes' limit on a label value
SHARED_PRODUCT_SUFFIX = "-SHARED"  # GFD's product label on shared GPUs (renameByDefault false)
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # per-node plugin config name
# Node labels naming a GPU sharing strategy without hardware isolation: key -> such values.
_SHARING_STRATEGY_LABELS: dict[str, frozenset[str]] = {
    "nvidia.com/gpu.sharing-strategy": frozenset({"time-slicing", "mps"}),
    "cloud.google.com/gke-gpu-sharing-strategy": frozenset({"time-sharing", "mps"}),
}
# Training-operator kinds with several pod templates: kind -> path of their replica specs.
_REPLICA_SPECS: dict[str, tuple[str, ...]] = {
    "PyTorchJob": ("spec", "pytorchReplicaSpecs"),
    "MPIJob": ("spec", "mpiReplicaSpecs"),
}
TRAINING_JOB_KINDS = frozenset({*_REPLICA_SPECS, "RayJob"})

# Kinds whose pod spec lives at spec.template.spec (CronJob: spec.jobTemplate.spec.template.spec).
CONTROLLER_KINDS = frozenset(
    {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
)
_REPLICATED_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})

# The spot node label of each cloud, as the mutating webhook writes it: (key, value).
SPOT_LABELS: dict[str, tuple[str, str]] = {
    "aws": ("karpenter.sh/capacity-type", "spot"),
    "eks": ("eks.amazonaws.com/capacityType", "SPOT"),
    "gke": ("cloud.google.com/gke-spot", "true"),
    "azure": ("kubernetes.azure.com/scalesetpriority", "spot"),
}

# Taints a cloud puts on its spot nodes by default, hence the toleration a pod pinned there needs.
SPOT_TOLERATIONS: dict[str, tuple[dict[str, str], ...]] = {
    "aws": (),
    "eks": (),
    "gke": (
        {
            "key": "cloud.google.com/gke-spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        },
    ),
    "azure": (
        {
            "key": "kubernetes.azure.com/scalesetpriority",
            "operator": "Equal",
            "value": "spot",
            "effect": "NoSchedule",
        },
    ),
}

# Every label that marks a node as spot/preemptible: key -> (spot value, `Exists` means spot).
# `Exists` is only meaningful for labels that on-demand nodes do not carry at all.
_SPOT_NODE_LABELS: dict[str, tuple[str, bool]] = {
    "karpenter.sh/capacity-type": ("spot", False),
    "eks.amazonaws.com/capacityType": ("SPOT", False),
    "cloud.google.com/gke-spot": ("true", True),
    "cloud.google.com/gke-preemptible": ("true", True),
    "kubernetes.azure.com/scalesetpriority": ("spot", True),
}

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_QUANTITY = re.compile(
    r"^\+?(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|([KMGTPE]i|[mkMGTPE])?)$", re.ASCII
)
_MEMORY = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMGT]i?)B?)?$", re.IGNORECASE | re.ASCII)
_MIG_IN_PRODUCT = re.compile(r"^(.+)-MIG-(\d+g\.\d+gb)$", re.IGNORECASE)


# ---------------------------------------------------------------------------- manifests


def load_manifests(text: str, source: str) -> list[dict[str, Any]]:
    """Kubernetes objects in a (multi-document) YAML or JSON text, `List` kinds flattened.

    Items of API lists (`PodList`, `DeploymentList`...) get the list's item kind and apiVersion
    when they lack them, as the API server leaves them out.
    """
    objects: list[dict[str, Any]] = []
    for line, document in _yaml_documents(text, source):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(
                "expected a Kubernetes object (a mapping with kind), "
                f"got {type(document).__name__}",
                file=source,
                line=line,
            )
        objects.extend(_flatten_lists(document))
    return objects


def _yaml_documents(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(first line, value) of each YAML document; YAML errors as InputError with their line."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is not None:
                    yield node.start_mark.line + 1, loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {problem}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {' '.join(str(exc).split())}", file=source) from None
    except RecursionError:
        raise InputError("invalid YAML: nested too deeply", file=source) from None


def _flatten_lists(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind = obj.get("kind")
    items = obj.get("items")
    if not (isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)):
        yield obj
        return
    item_kind = kind[: -len("List")]
    for item in items:
        if not isinstance(item, dict):
            continue
        if item_kind and "kind" not in item:
            item = {"kind": item_kind, **item}
            if "apiVersion" in obj and "apiVersion" not in item:
                item = {"apiVersion": obj["apiVersion"], **item}
        yield from _flatten_lists(item)


def namespace_resource(obj: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Name and labels of a Namespace object, for a namespace-label cache."""
    if not isinstance(obj, dict) or obj.get("kind") != "Namespace":
        raise InputError("expected a Namespace object")
    metadata = _mapping(obj.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("Namespace object has no metadata.name")
    return name, _string_map(metadata.get("labels"))


# ---------------------------------------------------------------------------- workloads


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
) -> Resource | None:
    """The workload `Resource` of a Pod, a pod-template controller or a training-operator job
    (PyTorchJob, MPIJob, RayJob); None for other kinds.

    `state` is the caller's: PLANNED at admission, RUNNING for live objects. `node_capacity`
    and `node_labels` (of the node a running pod is on) override what the pod's selectors say;
    `namespace_network_policies` is how many NetworkPolicies its namespace has (None: not
    listed).
    """
    if not isinstance(obj, dict):
        raise InputError(f"expected a Kubernetes object mapping, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    if kind in TRAINING_JOB_KINDS:
        groups = pod_groups(obj)
        if groups:
            return _training_job_resource(obj, kind, groups, namespace_labels, catalog=catalog,
                                          state=state, cluster=cluster, node_labels=node_labels,
                                          namespace_network_policies=namespace_network_policies)
    template = pod_template(obj)
    if template is None:
        return None
    template_metadata, pod_spec = template
    metadata = _mapping(obj.get("metadata"))
    unknown: set[str] = set()

    namespace = _text(metadata.get("namespace")) or "default"
    name = _text(metadata.get("name")) or _text(metadata.get("generateName")) or "<unnamed>"
    count, count_known = _replica_count(obj, kind)
    if not count_known:
        unknown.add("count")
    annotations = _first_wins(metadata.get("annotations"), template_metadata.get("annotations"))
    gpu, gpu_known, declared_known = _gpu_spec(pod_spec, annotations, catalog)
    if not gpu_known:
        unknown.add("gpu")
    if not declared_known:
        unknown.add("gpu.declared_memory_gib")
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
        tags=_first_wins(metadata.get("labels"), template_metadata.get("labels")),
        annotations=annotations,
        namespace_labels=_string_map(namespace_labels),
        count=count,
        gpu=gpu,
        capacity=node_capacity or workload_capacity(pod_spec),
        state=state,
        owner=_controller_owner(metadata),
        workload=workload,
        unknown=frozenset(unknown),
        raw=_string_keys(obj),
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
    pod_spec = _dig(obj, path)
    if kind in CONTROLLER_KINDS and isinstance(pod_spec, dict):
        return path
    # Custom resources (e.g. a training-operator job) are workloads when they hold a pod template.
    if isinstance(pod_spec, dict) and isinstance(pod_spec.get("containers"), list):
        return path
    return None


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for key in path:
        value = _mapping(value).get(key)
    return value


def pod_template(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(pod metadata, pod spec) of a workload object, or None if it is not a workload."""
    path = pod_template_path(obj)
    if path is None:
        return None
    template = _mapping(_dig(obj, path[:-1]))
    return _mapping(template.get("metadata")), _mapping(template.get("spec"))


def _replica_count(obj: dict[str, Any], kind: str) -> tuple[int, bool]:
    """(pods this workload stands for, whether that is known)."""
    spec = _mapping(obj.get("spec"))
    if kind in _REPLICATED_KINDS:
        replicas, known = _count_field(spec, "replicas")
        return (1 if replicas is None else replicas), known
    if kind == "Job":
        return _job_parallelism(spec)
    if kind == "CronJob":
        return _job_parallelism(_mapping(_mapping(spec.get("jobTemplate")).get("spec")))
    return 1, True  # a Pod, a DaemonSet (one per node: the node count is not ours to know)


def _job_parallelism(job_spec: dict[str, Any]) -> tuple[int, bool]:
    # A Job never runs more pods at once than it has completions.
    parallelism, parallelism_known = _count_field(job_spec, "parallelism")
    completions, completions_known = _count_field(job_spec, "completions")
    pods = 1 if parallelism is None else parallelism
    if completions is not None:
        pods = min(pods, completions)
    return pods, parallelism_known and completions_known


def _count_field(spec: dict[str, Any], key: str) -> tuple[int | None, bool]:
    """(a non-negative integer field, or None when absent or unreadable; whether readable)."""
    value = spec.get(key)
    if value is None:
        return None, True
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, True
    return None, False


def _controller_owner(metadata: dict[str, Any]) -> str | None:
    references = metadata.get("ownerReferences")
    for reference in references if isinstance(references, list) else []:
        if isinstance(reference, dict) and reference.get("controller") is True:
            kind, name = _text(reference.get("kind")), _text(reference.get("name"))
            if kind and name:
                return f"{kind}/{name}"
    return None


# ---------------------------------------------------------------------------- training jobs


@dataclass(frozen=True)
class PodGroup:
    """One pod template of a workload and how many pods it stands for."""

    metadata: dict[str, Any]
    spec: dict[str, Any]
    pods: int
    pods_known: bool = True


def pod_groups(obj: dict[str, Any]) -> list[PodGroup]:
    """The pod templates of a training-operator job, each with its pod count.

    PyTorchJob / MPIJob: every `*ReplicaSpecs` entry (`replicas`, default 1). RayJob: the head
    group (one pod) and every worker group (`replicas`, else `minReplicas`, else 1, times
    `numOfHosts`). Entries without a readable template are skipped.
    """
    kind = obj.get("kind")
    if kind in _REPLICA_SPECS:
        specs = _mapping(_dig(obj, _REPLICA_SPECS[kind]))
        found = [_replica_group(spec, ("replicas",)) for spec in specs.values()]
    elif kind == "RayJob":
        cluster = _mapping(_dig(obj, ("spec", "rayClusterSpec")))
        head = _mapping(cluster.get("headGroupSpec"))
        found = [_template_group(head.get("template"), 1, True)]
        for worker in _list(cluster.get("workerGroupSpecs")):
            found.append(_replica_group(worker, ("replicas", "minReplicas"), hosts=True))
    else:
        return []
    return [group for group in found if group is not None]


def _replica_group(spec: Any, count_keys: tuple[str, ...], *, hosts: bool = False
                   ) -> PodGroup | None:
    spec = _mapping(spec)
    pods, known = 1, True
    for key in count_keys:
        value, readable = _count_field(spec, key)
        known = known and readable
        if value is not None:
            pods = value
            break
    if hosts:
        per_replica, readable = _count_field(spec, "numOfHosts")
        known = known and readable
        pods *= 1 if per_replica is None else per_replica
    return _template_group(spec.get("template"), pods, known)


def _template_group(template: Any, pods: int, known: bool) -> PodGroup | None:
    template = _mapping(template)
    spec = template.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        return None
    return PodGroup(_mapping(template.get("metadata")), spec, pods, known)


def _training_job_resource(
    obj: dict[str, Any],
    kind: str,
    groups: list[PodGroup],
    namespace_labels: Mapping[str, str] | None,
    *,
    catalog: Catalog | None,
    state: State,
    cluster: str | None,
    node_labels: Mapping[str, str] | None,
    namespace_network_policies: int | None,
) -> Resource:
    """One resource for the whole job: its GPUs are every group's GPUs per pod × pods."""
    metadata = _mapping(obj.get("metadata"))
    namespace = _text(metadata.get("namespace")) or "default"
    name = _text(metadata.get("name")) or _text(metadata.get("generateName")) or "<unnamed>"
    annotations = _first_wins(metadata.get("annotations"),
                              *(g.metadata.get("annotations") for g in groups))
    unknown: set[str] = set()
    specs: list[tuple[PodGroup, GpuSpec]] = []
    for group in groups:
        gpu, gpu_known, declared_known = _gpu_spec(group.spec, annotations, catalog)
        if not gpu_known:
            unknown.add("gpu")
        if not declared_known:
            unknown.add("gpu.declared_memory_gib")
        if not group.pods_known:
            unknown.add("gpu")
        if gpu is not None:
            specs.append((group, gpu))
    gpu_groups = [group for group, _ in specs] or groups
    workload = workload_facts(obj, gpu_groups, annotations, node_labels=node_labels,
                              namespace_network_policies=namespace_network_policies)
    if workload.shared_gpu is None:
        unknown.add("workload.shared_gpu")
    capacities = {workload_capacity(group.spec) for group in gpu_groups}
    return Resource(
        provider=PROVIDER,
        kind=kind,
        category=Category.WORKLOAD,
        id=f"{kind}/{namespace}/{name}",
        name=name,
        cluster=cluster,
        namespace=namespace,
        tags=_first_wins(metadata.get("labels"), *(g.metadata.get("labels") for g in gpu_groups)),
        annotations=annotations,
        namespace_labels=_string_map(namespace_labels),
        count=1,
        gpu=_summed_gpu(specs),
        capacity=capacities.pop() if len(capacities) == 1 else Capacity.ON_DEMAND,
        state=state,
        owner=_controller_owner(metadata),
        workload=workload,
        unknown=frozenset(unknown),
        raw=_string_keys(obj),
    )


def _summed_gpu(specs: list[tuple[PodGroup, GpuSpec]]) -> GpuSpec | None:
    """Every group's GPUs per pod × its pods; model and memory when the groups agree."""
    if not specs:
        return None
    whole = [gpu.count for _, gpu in specs]
    models = {(gpu.model, gpu.memory_gib) for _, gpu in specs if (gpu.count or 0) > 0}
    model, memory = models.pop() if len(models) == 1 else (None, None)
    profiles = [gpu.mig_profile for _, gpu in specs if gpu.mig_profile]
    return GpuSpec(
        model=model,
        count=None if None in whole else sum((gpu.count or 0.0) * g.pods for g, gpu in specs),
        memory_gib=memory,
        mig_profile=profiles[0] if len(set(profiles)) == 1 else None,
        mig_count=sum(gpu.mig_count * g.pods for g, gpu in specs),
        declared_memory_gib=specs[0][1].declared_memory_gib,
    )


# ---------------------------------------------------------------------------- workload facts


def workload_facts(
    obj: dict[str, Any],
    groups: list[PodGroup],
    annotations: Mapping[str, str],
    *,
    node_labels: Mapping[str, str] | None = None,
    namespace_network_policies: int | None = None,
) -> WorkloadSpec:
    """What the queueing, sandbox, sharing and checkpoint policies read from a workload.

    Per-template values (runtime class, scheduler) are those all `groups` agree on, else None.
    """
    return WorkloadSpec(
        runtime_class_name=_agreed(_text(g.spec.get("runtimeClassName")) for g in groups),
        scheduler_name=_agreed(_text(g.spec.get("schedulerName")) for g in groups),
        queue_name=queue_name(obj),
        checkpoint=(annotations.get(CHECKPOINT_ANNOTATION) or "").strip() or None,
        volume_mount_paths=sorted({path for g in groups for path in
                                   persistent_mount_paths(g.spec, _claim_templates(obj))}),
        shared_gpu=(node_shares_gpus(node_labels) if node_labels is not None
                    else _any_shared(g.spec for g in groups)),
        node_name=_text(_mapping(obj.get("spec")).get("nodeName"))
        if obj.get("kind") == "Pod" else None,
        namespace_network_policies=namespace_network_policies,
    )


def _agreed(values: Iterator[str | None]) -> str | None:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def queue_name(obj: dict[str, Any]) -> str | None:
    """The Kueue queue label: on the object, or on a CronJob's job template (which Kueue reads
    from the Jobs the CronJob creates)."""
    labels = _string_map(_mapping(obj.get("metadata")).get("labels"))
    if obj.get("kind") == "CronJob":
        job_metadata = _mapping(_dig(obj, ("spec", "jobTemplate", "metadata")))
        labels = {**_string_map(job_metadata.get("labels")), **labels}
    return (labels.get(QUEUE_LABEL) or "").strip() or None


def _claim_templates(obj: dict[str, Any]) -> frozenset[str]:
    """Names of a StatefulSet's volumeClaimTemplates: volumes backed by a persistent claim."""
    if obj.get("kind") != "StatefulSet":
        return frozenset()
    templates = _list(_mapping(obj.get("spec")).get("volumeClaimTemplates"))
    return frozenset(name for t in templates
                     if (name := _text(_mapping(_mapping(t).get("metadata")).get("name"))))


def persistent_mount_paths(pod_spec: dict[str, Any], claim_templates: frozenset[str] = frozenset()
                           ) -> list[str]:
    """Mount paths of the pod's persistent volumes: PersistentVolumeClaim volumes (and a
    StatefulSet's claim templates). Generic ephemeral volumes die with the pod: not counted."""
    persistent = set(claim_templates)
    for volume in _list(pod_spec.get("volumes")):
        volume = _mapping(volume)
        name = _text(volume.get("name"))
        if name and isinstance(volume.get("persistentVolumeClaim"), dict):
            persistent.add(name)
    paths: list[str] = []
    for container in _list(pod_spec.get("containers")) + _list(pod_spec.get("initContainers")):
        for mount in _list(_mapping(container).get("volumeMounts")):
            mount = _mapping(mount)
            path = _text(mount.get("mountPath"))
            if path and _text(mount.get("name")) in persistent:
                paths.append(path)
    return paths


def node_shares_gpus(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say its GPUs are shared without hardware isolation."""
    return any(_shares(key, "In", (value,)) for key, value in labels.items())


def _any_shared(pod_specs: Iterator[dict[str, Any]]) -> bool | None:
    verdicts = [_shared_gpu(spec) for spec in pod_specs]
    if True in verdicts:
        return True
    return None if None in verdicts else False


def _shared_gpu(pod_spec: dict[str, Any]) -> bool | None:
    """True when the pod asks for a shared GPU (`nvidia.com/gpu.shared`, or every node it can
    land on is time-sliced / MPS by its labels); None when it may land on shared GPUs or pins a
    device-plugin configuration whose content is not known here; else False."""
    for container in _list(pod_spec.get("containers")) + _list(pod_spec.get("initContainers")):
        resources = _mapping(_mapping(container).get("resources"))
        if any(SHARED_GPU_RESOURCE in _mapping(resources.get(part))
               for part in ("limits", "requests")):
            return True
    terms = _node_requirements(pod_spec)
    if _every_term(terms, _shares):
        return True
    if any(key == DEVICE_PLUGIN_CONFIG_LABEL or _shares(key, operator, values)
           for term in terms for key, operator, values in term):
        return None
    return False


def _shares(key: str, operator: str, values: tuple[str, ...]) -> bool:
    if key in _SHARING_STRATEGY_LABELS:
        return operator == "In" and bool(values) and all(
            v in _SHARING_STRATEGY_LABELS[key] for v in values)
    if key == GPU_REPLICAS_LABEL:
        if operator == "Exists":
            return True
        if operator == "Gt":
            return bool(values) and values[0].isdigit() and int(values[0]) >= 1
        return operator == "In" and bool(values) and all(
            v.isdigit() and int(v) > 1 for v in values)
    if key == GPU_PRODUCT_LABEL:
        return operator == "In" and bool(values) and all(
            v.upper().endswith(SHARED_PRODUCT_SUFFIX) for v in values)
    return False


# ---------------------------------------------------------------------------- GPU requests


@dataclass
class GpuRequests:
    """Effective pod-level extended-resource requests; `malformed` when one was unreadable."""

    amounts: dict[str, float] = field(default_factory=dict)
    malformed: bool = False


def _gpu_spec(
    pod_spec: dict[str, Any], annotations: dict[str, str], catalog: Catalog | None
) -> tuple[GpuSpec | None, bool, bool]:
    """(GPU spec or None when no GPU is requested, GPU request known, declared memory known)."""
    requests = effective_gpu_requests(pod_spec)
    whole = requests.amounts.get(GPU_RESOURCE, 0.0)
    migs = {
        name[len(MIG_RESOURCE_PREFIX) :]: int(amount)
        for name, amount in requests.amounts.items()
        if name.startswith(MIG_RESOURCE_PREFIX) and amount > 0
    }
    declared, declared_known = declared_memory_gib(annotations.get(GPU_MEMORY_ANNOTATION))
    if whole == 0 and not migs and not requests.malformed:
        return None, True, declared_known

    requirements = _node_requirements(pod_spec)
    product = _pinned_value(requirements, GPU_PRODUCT_LABEL)
    if product is not None and len(product) > MAX_LABEL_VALUE_CHARS:
        product = None  # no node carries a label value that long: no GPU model is pinned
    slice_of = _MIG_IN_PRODUCT.match(product) if product else None
    if slice_of:
        # MIG "single" strategy: nvidia.com/gpu on such a node is one slice of the named GPU.
        product = slice_of.group(1)
        migs[slice_of.group(2).lower()] = migs.get(slice_of.group(2).lower(), 0) + int(whole)
        whole = 0.0
    model, memory = gpu_model(product, catalog or builtin_catalog()) if product else (None, None)
    if memory is None:
        memory = _memory_label_gib(_pinned_value(requirements, GPU_MEMORY_LABEL))

    mig_profile = max(migs, key=_mig_memory) if migs else None
    spec = GpuSpec(
        model=model,
        count=None if requests.malformed else whole,
        memory_gib=memory,
        mig_profile=mig_profile,
        mig_count=sum(migs.values()),
        declared_memory_gib=declared,
    )
    return spec, not requests.malformed, declared_known


def effective_gpu_requests(pod_spec: dict[str, Any]) -> GpuRequests:
    """GPU and MIG requests of a pod as the scheduler counts them.

    Per resource: regular containers and sidecars (restartable init containers) add up; each
    ordinary init container runs alone beside the sidecars started before it; the pod needs the
    larger of the two.
    """
    result = GpuRequests()

    def container_requests(container: Any) -> dict[str, float]:
        amounts, malformed = _container_gpu_requests(container)
        result.malformed = result.malformed or malformed
        return amounts

    total: dict[str, float] = {}
    for container in _list(pod_spec.get("containers")):
        _add(total, container_requests(container))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in _list(pod_spec.get("initContainers")):
        amounts = container_requests(container)
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            _add(sidecars, amounts)
            _add(total, amounts)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, amounts)
        for name, amount in running.items():
            init_peak[name] = max(init_peak.get(name, 0.0), amount)
    for name in total.keys() | init_peak.keys():
        result.amounts[name] = max(total.get(name, 0.0), init_peak.get(name, 0.0))
    return result


def _container_gpu_requests(container: Any) -> tuple[dict[str, float], bool]:
    """GPU/MIG amounts one container asks for (limits, else requests), and whether any was bad.

    Extended resources cannot be overcommitted: the API server requires requests == limits and
    defaults requests to limits, so limits are the answer when given.
    """
    resources = _mapping(_mapping(container).get("resources"))
    limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
    amounts: dict[str, float] = {}
    malformed = False
    for name in limits.keys() | requests.keys():
        if not _is_gpu_resource(name):
            continue
        value = limits[name] if name in limits else requests[name]
        amount = gpu_quantity(value)
        if amount is None:
            malformed = True
        else:
            amounts[name] = amount
    return amounts, malformed


def _is_gpu_resource(name: Any) -> bool:
    return isinstance(name, str) and (
        name == GPU_RESOURCE
        or (name.startswith(MIG_RESOURCE_PREFIX) and len(name) > len(MIG_RESOURCE_PREFIX))
    )


def _add(into: dict[str, float], amounts: Mapping[str, float]) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0.0) + amount


def gpu_quantity(value: Any) -> float | None:
    """A whole, non-negative device count from a Kubernetes quantity; None when malformed."""
    amount = parse_quantity(value)
    if amount is None or amount < 0 or not amount.is_integer():
        return None
    return amount


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes resource quantity (`1`, `"2"`, `"500m"`, `"1Gi"`, `"1e3"`) as a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if not isinstance(value, str):
        return None
    found = _QUANTITY.match(value.strip())
    if found is None:
        return None
    digits, exponent, suffix = found.groups()
    number = float(digits + (exponent or ""))
    if suffix in _BINARY_SUFFIXES:
        number *= _BINARY_SUFFIXES[suffix]
    else:
        number *= _DECIMAL_SUFFIXES[suffix or ""]
    return number if math.isfinite(number) else None


def declared_memory_gib(value: Any) -> tuple[float | None, bool]:
    """GiB from the `gpuwarden.io/gpu-memory` annotation: (value, known).

    `12Gi`/`12GiB` are GiB, `12G`/`12GB` are 10^9 bytes, `12000Mi` MiB; a bare number is GiB.
    """
    if value is None:
        return None, True
    found = _MEMORY.match(value.strip()) if isinstance(value, str) else None
    if found is None:
        return None, False
    number, unit = float(found.group(1)), (found.group(2) or "").upper()
    if not unit:
        gib = number
    elif unit.endswith("I"):
        gib = number * 1024.0 ** ("KMGT".index(unit[0]) - 2)
    else:
        gib = number * 1000.0 ** ("KMGT".index(unit[0]) + 1) / 2**30
    if not math.isfinite(gib) or gib <= 0:
        return None, False
    return gib, True


def _mig_memory(profile: str) -> float:
    found = re.search(r"\.(\d+)gb", profile)
    return float(found.group(1)) if found else 0.0


# ---------------------------------------------------------------------------- node selection

# One alternative a pod may schedule onto: (key, operator, values) requirements that must all hold.
_Term = list[tuple[str, str, tuple[str, ...]]]


def _node_requirements(pod_spec: dict[str, Any]) -> list[_Term]:
    """The node-selector terms a pod can schedule onto (ORed), each a list of ANDed requirements.

    nodeSelector entries hold in every term; preferred affinity constrains nothing.
    """
    selector: _Term = [
        (key, "In", (value,)) for key, value in _string_map(pod_spec.get("nodeSelector")).items()
    ]
    node_affinity = _mapping(_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [_affinity_term(term) for term in _list(required.get("nodeSelectorTerms"))]
    if not terms:
        return [selector]
    return [selector + term for term in terms]


def _affinity_term(term: Any) -> _Term:
    requirements: _Term = []
    for expression in _list(_mapping(term).get("matchExpressions")):
        expression = _mapping(expression)
        key, operator = expression.get("key"), expression.get("operator")
        if not (isinstance(key, str) and isinstance(operator, str)):
            continue
        values = tuple(v for v in _list(expression.get("values")) if isinstance(v, str))
        requirements.append((key, operator, values))
    return requirements


def _every_term(terms: list[_Term], holds: Callable[[str, str, tuple[str, ...]], bool]) -> bool:
    return all(any(holds(*requirement) for requirement in term) for term in terms)


def workload_capacity(pod_spec: dict[str, Any]) -> Capacity:
    """SPOT when every schedulable term pins a spot capacity label, else ON_DEMAND."""
    terms = _node_requirements(pod_spec)
    return Capacity.SPOT if _every_term(terms, _requires_spot) else Capacity.ON_DEMAND


def _requires_spot(key: str, operator: str, values: tuple[str, ...]) -> bool:
    if key not in _SPOT_NODE_LABELS:
        return False
    spot_value, exists_means_spot = _SPOT_NODE_LABELS[key]
    if operator == "In":
        return bool(values) and all(value == spot_value for value in values)
    return operator == "Exists" and exists_means_spot


def _pinned_value(terms: list[_Term], key: str) -> str | None:
    """The single value every term requires for `key` (`In` with one value), else None."""
    pinned: set[str] = set()
    for term in terms:
        values = {v[0] for k, op, v in term if k == key and op == "In" and len(v) == 1}
        if len(values) != 1:
            return None
        pinned |= values
    return pinned.pop() if len(pinned) == 1 else None


def _memory_label_gib(value: str | None) -> float | None:
    if value is None or not re.fullmatch(r"[0-9]{1,9}", value) or int(value) == 0:
        return None
    return int(value) / 1024.0


# ---------------------------------------------------------------------------- GPU model


def gpu_model(product: str, catalog: Catalog) -> tuple[str, float | None]:
    """(catalog GPU model name, memory GiB per GPU) for a `nvidia.com/gpu.product` label value.

    "NVIDIA-A100-SXM4-80GB" -> ("NVIDIA A100 80GB SXM", 80.0). A label the catalog does not know
    (or that fits several models of different memory) keeps its own name, with the memory its
    name states, if any. A value longer than a label value can be is no node's product: it is
    neither matched nor remembered.
    """
    if len(product) > MAX_LABEL_VALUE_CHARS:
        return product, None
    return catalog.remembered(("product", product, None), lambda: _gpu_model(product, catalog))


def _gpu_model(product: str, catalog: Catalog) -> tuple[str, float | None]:
    """Linear in the label: its words are read once, then each catalog model's words (parsed
    once per catalog) are looked up in them."""
    wanted = _Words.of(product)
    scored: list[tuple[int, str, float]] = []
    for name, (memory, words) in _catalog_models(catalog).items():
        score = _match_score(wanted, words)
        if score is not None:
            scored.append((score, name, memory))
    if scored:
        best = max(score for score, _, _ in scored)
        top = sorted((len(n), n, m) for s, n, m in scored if s == best)
        if len({memory for _, _, memory in top}) == 1:
            return top[0][1], top[0][2]
    stated = re.search(r"(\d+)GB", product.upper())
    return product, float(stated.group(1)) if stated else None


def _catalog_models(catalog: Catalog) -> dict[str, tuple[float, list[str]]]:
    """Every catalog GPU model name → (memory GiB, its words)."""
    def parse() -> dict[str, tuple[float, list[str]]]:
        models = {a.gpu_model: a.gpu_memory_gib for a in catalog.accelerators.values()}
        models.update({i.gpu_model: i.gpu_memory_gib for i in catalog.instances.values()})
        return {name: (memory, _product_tokens(name)) for name, memory in models.items()}

    return catalog.remembered(("product-models", None, None), parse)


def _product_tokens(name: str) -> list[str]:
    return [token for token in re.split(r"[-_\s]+", name.upper()) if token]


@dataclass(frozen=True)
class _Words:
    """A product label's words, with the memory sizes and form factors it states."""

    all: frozenset[str]
    memory: frozenset[str]
    forms: tuple[str, ...]

    @classmethod
    def of(cls, label: str) -> _Words:
        words = _product_tokens(label)
        return cls(frozenset(words), frozenset(w for w in words if _word_kind(w) == "memory"),
                   tuple(w for w in words if _word_kind(w) == "form"))

    def carry(self, model_word: str) -> bool:
        if _word_kind(model_word) == "form":
            return any(form.startswith(model_word) for form in self.forms)  # SXM4 is an SXM part
        return model_word in self.all


def _match_score(label: _Words, model: list[str]) -> int | None:
    """How many of a catalog model's words the label carries; None when they contradict.

    The chip (the word after NVIDIA) must appear as is; a memory size or SXM/PCIe form factor
    stated on both sides must agree.
    """
    chip = model[1] if len(model) > 1 and model[0] == "NVIDIA" else model[0]
    if chip not in label.all:
        return None
    for word in model:
        kind = _word_kind(word)
        stated = label.memory if kind == "memory" else label.forms if kind == "form" else ()
        if stated and not label.carry(word):
            return None
    return sum(1 for word in model if label.carry(word))


def _word_kind(word: str) -> str | None:
    if re.fullmatch(r"\d+GB", word):
        return "memory"
    if word.startswith(("SXM", "PCIE")):
        return "form"
    return None


# ---------------------------------------------------------------------------- loose dict access


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _label_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _string_map(value: Any) -> dict[str, str]:
    """A labels/annotations mapping with scalar values as strings; anything else dropped."""
    if not isinstance(value, Mapping):
        return {}
    result: dict[str, str] = {}
    for key, item in value.items():
        text = _label_value(item)
        if isinstance(key, str) and text is not None:
            result[key] = text
    return result


def _first_wins(*sources: Any) -> dict[str, str]:
    merged: dict[str, str] = {}
    for source in sources:
        for key, value in _string_map(source).items():
            merged.setdefault(key, value)
    return merged


def _string_keys(obj: dict[Any, Any]) -> dict[str, Any]:
    if all(isinstance(key, str) for key in obj):
        return obj
    return {str(key): value for key, value in obj.items()}
