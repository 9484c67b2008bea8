"""Pod → owning workload, by the ownerReferences chain and Kubernetes' naming rules.

A DCGM series names the pod that used a GPU; findings are about the workload that owns it.
The chain is followed through the objects at hand (Pods, ReplicaSets, Jobs from the snapshot or
the live cluster): Pod → ReplicaSet → Deployment, Pod → Job → CronJob, Pod → StatefulSet, ... and
the first object in the chain that is a scanned resource wins (a running Job that is listed
itself is nearer than its CronJob).

Where an object is missing, the names controllers give their children fill the gap:
ReplicaSet `<deployment>-<pod-template-hash>`, Job `<cronjob>-<scheduled minute>`, and for a
pod known by name only `<statefulset>-<ordinal>`, `<deployment>-<hash>-<5 chars>`,
`<job or daemonset>-<5 chars>`, `<cronjob>-<minute>-<5 chars>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.model import Resource
from engine.sources.kubernetes.ownership import minimal_owner

_SUFFIX = r"[a-z0-9]{5}"
_HASH = r"[a-z0-9]{1,10}"
_MAX_HOPS = 6


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the object's controller ownerReference (else its only owner)."""
    references = [r for r in _metadata(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    chosen = next((r for r in references if r.get("controller") is True), None)
    if chosen is None and len(references) == 1:
        chosen = references[0]
    if chosen is None or not chosen.get("kind") or not chosen.get("name"):
        return None
    return str(chosen["kind"]), str(chosen["name"])


class OwnerIndex:
    """Resolve `(namespace, pod)` to the workload resource that owns the pod."""

    def __init__(self, resources: Iterable[Resource], objects: Iterable[Mapping[str, Any]]):
        self.workloads: dict[str, Resource] = {
            r.id: r for r in resources if r.provider == "kubernetes"
        }
        self.objects: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        self.pod_namespaces: dict[str, set[str]] = {}
        for obj in objects:
            kind, metadata = obj.get("kind"), _metadata(obj)
            name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
            if isinstance(kind, str) and isinstance(name, str):
                self.objects[(kind, str(namespace), name)] = obj
                if kind == "Pod":
                    self.pod_namespaces.setdefault(name, set()).add(str(namespace))
        for resource in self.workloads.values():
            if resource.kind == "Pod" and resource.namespace:
                self.pod_namespaces.setdefault(resource.name, set()).add(resource.namespace)

    def pod_object(self, namespace: str, pod: str) -> Mapping[str, Any] | None:
        return self.objects.get(("Pod", namespace, pod))

    def namespace_of(self, pod: str) -> str | None:
        """The namespace of a pod known by name only, when exactly one namespace has it."""
        namespaces = self.pod_namespaces.get(pod, set())
        return next(iter(namespaces)) if len(namespaces) == 1 else None

    def workload(self, namespace: str, pod: str) -> Resource | None:
        """The nearest scanned workload owning the pod, or None."""
        pod_object = self.pod_object(namespace, pod)
        if pod_object is None and f"Pod/{namespace}/{pod}" not in self.workloads:
            return self._by_pod_name(namespace, pod)
        kind, name = "Pod", pod
        pod_labels = _metadata(pod_object or {}).get("labels") or {}
        for _ in range(_MAX_HOPS):
            found = self.workloads.get(f"{kind}/{namespace}/{name}")
            if found is not None:
                return found
            parent = self._parent(kind, namespace, name, pod_labels)
            if parent is None:
                return None
            kind, name = parent
        return None

    def _parent(self, kind: str, namespace: str, name: str,
                pod_labels: Mapping[str, Any]) -> tuple[str, str] | None:
        obj = self.objects.get((kind, namespace, name))
        if obj is not None:
            return controller_of(obj)
        if kind == "ReplicaSet":
            template_hash = pod_labels.get("pod-template-hash")
            if isinstance(template_hash, str) and name.endswith("-" + template_hash):
                return "Deployment", name[: -len(template_hash) - 1]
            return ("Deployment", name.rsplit("-", 1)[0]) if "-" in name else None
        if kind == "Job":
            scheduled = re.fullmatch(r"(.+)-\d+", name)
            if scheduled and f"CronJob/{namespace}/{scheduled.group(1)}" in self.workloads:
                return "CronJob", scheduled.group(1)
        return None

    def _by_pod_name(self, namespace: str, pod: str) -> Resource | None:
        """A pod known by name only: the workload whose children are named like it."""
        candidates: list[tuple[str, str]] = []
        rules = (
            ("StatefulSet", r"(.+)-\d+"),
            ("Deployment", rf"(.+)-{_HASH}-{_SUFFIX}"),
            ("CronJob", rf"(.+)-\d+-{_SUFFIX}"),
            ("Job", rf"(.+)-{_SUFFIX}"),
            ("DaemonSet", rf"(.+)-{_SUFFIX}"),
        )
        for kind, pattern in rules:
            found = re.fullmatch(pattern, pod)
            if found and f"{kind}/{namespace}/{found.group(1)}" in self.workloads:
                candidates.append((kind, found.group(1)))
        if not candidates:
            return None
        longest = max(len(name) for _, name in candidates)
        best = [c for c in candidates if len(c[1]) == longest]
        if len(best) != 1:
            return None  # two workloads could own it: do not guess
        kind, name = best[0]
        return self.workloads[f"{kind}/{namespace}/{name}"]


def list_pod_owners(api_client: Any, wanted: set[tuple[str, str]], chunk: int = 500
                    ) -> list[dict[str, Any]]:
    """The listed pods among `wanted` (namespace, name), through the live kubernetes client,
    reduced to what the ownership chain needs."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        arguments: dict[str, Any] = {"limit": chunk}
        if token:
            arguments["_continue"] = token
        page = core.list_pod_for_all_namespaces(**arguments)
        for item in page.items or []:
            obj = api_client.sanitize_for_serialization(item)
            metadata = obj.get("metadata") or {}
            if (metadata.get("namespace") or "default", metadata.get("name")) in wanted:
                found.append(minimal_owner({**obj, "kind": "Pod"}))
        token = page.metadata._continue if page.metadata is not None else None
        if not token:
            return found
