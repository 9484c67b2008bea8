"""The workload facts the queueing, sandboxing, sharing and checkpoint policies read
(`WorkloadSpec`: runtime class, scheduler, Kueue queue label, checkpoint annotation, persistent
volume mounts, GPU sharing), over the pod templates (`PodGroup`) of a workload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engine.core.model import WorkloadSpec
from engine.sources.kubernetes.objects import as_list, as_mapping, as_text, dig, string_map
from engine.sources.kubernetes.sharing import any_shared, node_shares_gpus

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CHECKPOINT_ANNOTATION = "gpuwarden.io/checkpoint"


@dataclass(frozen=True)
class PodGroup:
    """One pod template of a workload and how many pods it stands for."""

    metadata: dict[str, Any]
    spec: dict[str, Any]
    pods: int
    pods_known: bool = True
    path: tuple[str | int, ...] | None = None  # where its pod spec sits in the object


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
        runtime_class_name=_agreed(as_text(g.spec.get("runtimeClassName")) for g in groups),
        scheduler_name=_agreed(as_text(g.spec.get("schedulerName")) for g in groups),
        queue_name=queue_name(obj),
        checkpoint=(annotations.get(CHECKPOINT_ANNOTATION) or "").strip() or None,
        volume_mount_paths=sorted({path for g in groups for path in
                                   persistent_mount_paths(g.spec, _claim_templates(obj))}),
        shared_gpu=(node_shares_gpus(node_labels) if node_labels is not None
                    else any_shared(g.spec for g in groups)),
        node_name=as_text(as_mapping(obj.get("spec")).get("nodeName"))
        if obj.get("kind") == "Pod" else None,
        namespace_network_policies=namespace_network_policies,
    )


def _agreed(values: Iterator[str | None]) -> str | None:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def queue_name(obj: dict[str, Any]) -> str | None:
    """The Kueue queue label: on the object, or on a CronJob's job template (which Kueue reads
    from the Jobs the CronJob creates)."""
    labels = string_map(as_mapping(obj.get("metadata")).get("labels"))
    if obj.get("kind") == "CronJob":
        job_metadata = as_mapping(dig(obj, ("spec", "jobTemplate", "metadata")))
        labels = {**string_map(job_metadata.get("labels")), **labels}
    return (labels.get(QUEUE_LABEL) or "").strip() or None


def _claim_templates(obj: dict[str, Any]) -> frozenset[str]:
    """Names of a StatefulSet's volumeClaimTemplates: volumes backed by a persistent claim."""
    if obj.get("kind") != "StatefulSet":
        return frozenset()
    templates = as_list(as_mapping(obj.get("spec")).get("volumeClaimTemplates"))
    return frozenset(name for t in templates
                     if (name := as_text(as_mapping(as_mapping(t).get("metadata")).get("name"))))


def persistent_mount_paths(pod_spec: dict[str, Any], claim_templates: frozenset[str] = frozenset()
                           ) -> list[str]:
    """Mount paths of the pod's persistent volumes: PersistentVolumeClaim volumes (and a
    StatefulSet's claim templates). Generic ephemeral volumes die with the pod: not counted."""
    persistent = set(claim_templates)
    for volume in as_list(pod_spec.get("volumes")):
        volume = as_mapping(volume)
        name = as_text(volume.get("name"))
        if name and isinstance(volume.get("persistentVolumeClaim"), dict):
            persistent.add(name)
    paths: list[str] = []
    for container in as_list(pod_spec.get("containers")) + as_list(pod_spec.get("initContainers")):
        for mount in as_list(as_mapping(container).get("volumeMounts")):
            mount = as_mapping(mount)
            path = as_text(mount.get("mountPath"))
            if path and as_text(mount.get("name")) in persistent:
                paths.append(path)
    return paths
