"""Kubernetes adapter: Pods and controller pod templates normalized into workload resources.

Input is plain dicts (YAML manifests, AdmissionReview objects, API list items); the `kubernetes`
client is imported only by `live`, inside its functions. Everything a provider calls a field
lives in this package: GPU requests (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`), the GPU
model a workload is pinned to (`nvidia.com/gpu.product`), spot capacity labels per cloud, labels
and annotations, and the workload facts the queueing, sandboxing and checkpoint policies read.

Objects are read defensively: a field of the wrong type is treated as absent, and a GPU quantity
that cannot be read marks the GPU spec unknown instead of failing, so a webhook never crashes on
what the API server let through.

Modules, each one concept (a module imports only those above it):

- `objects`: loose access to API object fields.
- `manifests`: YAML/JSON documents to objects; Namespace labels.
- `quantities`: resource quantities, GPU counts, declared GPU memory.
- `placement`: node-selector terms, spot capacity labels and tolerations.
- `gpu_models`: GPU feature discovery labels to the catalog's GPU model.
- `gpu_requests`: whole-GPU and MIG requests of a pod, its `GpuSpec`.
- `sharing`: time-slicing and MPS.
- `facts`: the `WorkloadSpec` of a workload's pod templates.
- `dra`: GPUs of DRA ResourceClaims / ResourceClaimTemplates.
- `crd_kinds`: the registry of multi-template kinds (training operators, Ray, LWS, JobSet,
  Volcano, KServe, Spark): where their pod templates live, how their pods multiply.
- `training_jobs`: one resource for a registered kind, GPUs summed over its templates.
- `node_pools`: Karpenter NodePools as GPU node groups.
- `unread_kinds`: any other kind that asks for accelerators, with unknown GPUs.
- `workloads`: Pods and pod-template controllers, the `workload_resource` entry point.
- `cluster`: a listed cluster normalized, and saved as a snapshot section.
- `snapshot`: the `kubernetes:` snapshot section reader.
- `live`: the `--source k8s` adapter over the official client.
"""

from __future__ import annotations

from engine.sources.kubernetes.cluster import (
    ClusterState,
    NodeInfo,
    cluster_resources,
    kubernetes_snapshot,
    node_info,
)
from engine.sources.kubernetes.crd_kinds import KINDS, TRAINING_KINDS, KindEntry, kind_entry
from engine.sources.kubernetes.dra import ClaimIndex, DeviceClaim, claim_index
from engine.sources.kubernetes.facts import (
    CHECKPOINT_ANNOTATION,
    QUEUE_LABEL,
    PodGroup,
    persistent_mount_paths,
    queue_name,
    workload_facts,
)
from engine.sources.kubernetes.gpu_models import (
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    MAX_LABEL_VALUE_CHARS,
    gpu_model,
)
from engine.sources.kubernetes.gpu_requests import (
    GPU_MEMORY_ANNOTATION,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    GpuRequests,
    effective_gpu_requests,
)
from engine.sources.kubernetes.manifests import load_manifests, namespace_resource
from engine.sources.kubernetes.objects import PROVIDER
from engine.sources.kubernetes.placement import SPOT_LABELS, SPOT_TOLERATIONS, workload_capacity
from engine.sources.kubernetes.quantities import declared_memory_gib, gpu_quantity, parse_quantity
from engine.sources.kubernetes.sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_REPLICAS_LABEL,
    SHARED_GPU_RESOURCE,
    SHARED_PRODUCT_SUFFIX,
    node_shares_gpus,
)
from engine.sources.kubernetes.training_jobs import TRAINING_JOB_KINDS, pod_groups
from engine.sources.kubernetes.workloads import (
    CONTROLLER_KINDS,
    pod_template,
    pod_template_path,
    workload_resource,
)

__all__ = [
    "CHECKPOINT_ANNOTATION",
    "CONTROLLER_KINDS",
    "DEVICE_PLUGIN_CONFIG_LABEL",
    "GPU_MEMORY_ANNOTATION",
    "GPU_MEMORY_LABEL",
    "GPU_PRODUCT_LABEL",
    "GPU_REPLICAS_LABEL",
    "GPU_RESOURCE",
    "KINDS",
    "MAX_LABEL_VALUE_CHARS",
    "MIG_RESOURCE_PREFIX",
    "PROVIDER",
    "QUEUE_LABEL",
    "SHARED_GPU_RESOURCE",
    "SHARED_PRODUCT_SUFFIX",
    "SPOT_LABELS",
    "SPOT_TOLERATIONS",
    "TRAINING_JOB_KINDS",
    "TRAINING_KINDS",
    "ClaimIndex",
    "ClusterState",
    "DeviceClaim",
    "GpuRequests",
    "KindEntry",
    "NodeInfo",
    "PodGroup",
    "claim_index",
    "cluster_resources",
    "declared_memory_gib",
    "effective_gpu_requests",
    "gpu_model",
    "gpu_quantity",
    "kind_entry",
    "kubernetes_snapshot",
    "load_manifests",
    "namespace_resource",
    "node_info",
    "node_shares_gpus",
    "parse_quantity",
    "persistent_mount_paths",
    "pod_groups",
    "pod_template",
    "pod_template_path",
    "queue_name",
    "workload_capacity",
    "workload_facts",
    "workload_resource",
]
