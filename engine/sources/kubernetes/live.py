"""Live Kubernetes source: list a cluster through the official `kubernetes` client.

Lists namespaces, nodes, NetworkPolicies and the GPU-carrying workload kinds (plus the
training-operator jobs PyTorchJob, MPIJob and RayJob where their CRDs are installed) in chunks
(`limit`/`continue`), turns every object into the plain dict the API serves (camelCase keys, kind
and apiVersion filled in, as list items lack them), then normalizes workloads with the same
adapter the webhook and snapshots use (`cluster`). NetworkPolicies the credentials may not list
leave their count unknown rather than failing the scan. The client library is imported inside
functions only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError
from engine.sources.collected import Collected, ScanOptions
from engine.sources.kubernetes.cluster import (
    NETWORK_POLICY,
    ClusterState,
    cluster_resources,
    kubernetes_snapshot,
)
from engine.sources.kubernetes.crd_kinds import KINDS
from engine.sources.kubernetes.training_jobs import TRAINING_JOB_KINDS

DEFAULT_CHUNK = 500

# (kind, apiVersion, client API class, list method over all namespaces)
_WORKLOAD_LISTS: tuple[tuple[str, str, str, str], ...] = (
    ("Deployment", "apps/v1", "AppsV1Api", "list_deployment_for_all_namespaces"),
    ("StatefulSet", "apps/v1", "AppsV1Api", "list_stateful_set_for_all_namespaces"),
    ("DaemonSet", "apps/v1", "AppsV1Api", "list_daemon_set_for_all_namespaces"),
    ("Job", "batch/v1", "BatchV1Api", "list_job_for_all_namespaces"),
    ("CronJob", "batch/v1", "BatchV1Api", "list_cron_job_for_all_namespaces"),
    ("Pod", "v1", "CoreV1Api", "list_pod_for_all_namespaces"),
)

# Custom resources listed through CustomObjectsApi when their CRD is installed: every kind of
# the registry (`crd_kinds`), Karpenter NodePools and the DRA claims pods name:
# (kind, group, versions tried in order, plural).
_CUSTOM_WORKLOADS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    *((e.kind, e.group, e.versions, e.plural) for e in KINDS.values()),
    ("NodePool", "karpenter.sh", ("v1",), "nodepools"),
    ("ResourceClaimTemplate", "resource.k8s.io", ("v1", "v1beta2", "v1beta1"),
     "resourceclaimtemplates"),
    ("ResourceClaim", "resource.k8s.io", ("v1", "v1beta2", "v1beta1"), "resourceclaims"),
)


def connect(*, kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient from a kubeconfig (file/context given, or the default one), or in-cluster.

    In-cluster configuration is used when running in a pod and no kubeconfig or context was
    asked for explicitly.
    """
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, context=context,
                                    client_configuration=configuration)
    except ConfigException as exc:
        raise InputError(f"kubernetes: cannot load configuration: {_one_line(exc)}",
                         file=kubeconfig) from None
    except OSError as exc:
        raise InputError(f"kubernetes: cannot read kubeconfig: {exc.strerror or exc}",
                         file=kubeconfig) from None
    return client.ApiClient(configuration)


def current_cluster_name(*, kubeconfig: str | None = None,
                         context: str | None = None) -> str | None:
    """The kubeconfig context's cluster name, when there is a kubeconfig to read it from."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError):
        return None
    chosen = next((c for c in contexts or [] if c.get("name") == context), active)
    if not isinstance(chosen, Mapping):
        return None
    name = (chosen.get("context") or {}).get("cluster") or chosen.get("name")
    return str(name) if name else None


def list_cluster(
    api_client: Any = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    chunk: int = DEFAULT_CHUNK,
    cluster: str | None = None,
) -> ClusterState:
    """Namespaces, nodes and workloads of a cluster, each list read `chunk` items at a time.

    Pods owned by a controller are left out (their controller's template stands for them), and
    so are pods and Jobs that have finished.
    """
    if chunk < 1:
        raise InputError("kubernetes: chunk size must be at least 1")
    if api_client is None:
        api_client = connect(kubeconfig=kubeconfig, context=context)
        cluster = cluster or current_cluster_name(kubeconfig=kubeconfig, context=context)
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    state = ClusterState(cluster=cluster)
    state.namespaces = list(_list_all(api_client, core.list_namespace, "Namespace", "v1", chunk))
    state.nodes = list(_list_all(api_client, core.list_node, "Node", "v1", chunk))
    for kind, api_version, api_class, method in _WORKLOAD_LISTS:
        lister = getattr(getattr(client, api_class)(api_client), method)
        for obj in _list_all(api_client, lister, kind, api_version, chunk):
            if _is_audited(obj):
                state.workloads.append(obj)
    networking = client.NetworkingV1Api(api_client)
    state.network_policies = _optional(lambda: list(_list_all(
        api_client, networking.list_network_policy_for_all_namespaces, NETWORK_POLICY,
        "networking.k8s.io/v1", chunk, optional=True)))
    custom = client.CustomObjectsApi(api_client)
    for kind, group, versions, plural in _CUSTOM_WORKLOADS:
        for version in versions:
            objects = _optional(partial(_list_custom, custom, kind, group, version, plural, chunk))
            if objects is not None:
                state.workloads.extend(obj for obj in objects if _is_audited(obj))
                break
    return state


class _NotListable(Exception):
    """A listing answered 403 (not permitted) or 404 (its CRD is not installed)."""


def _optional(read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """A listing the audit can do without: None when it is not permitted or not served."""
    try:
        return read()
    except _NotListable:
        return None


def _list_custom(custom: Any, kind: str, group: str, version: str, plural: str,
                 chunk: int) -> list[dict[str, Any]]:
    """Every object of a custom resource in all namespaces (served as plain dicts already)."""
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = _call(custom.list_cluster_custom_object, kind, optional=True, group=group,
                     version=version, plural=plural, limit=chunk, _continue=token)
        for item in page.get("items") or [] if isinstance(page, dict) else []:
            if isinstance(item, dict):
                found.append({**item, "kind": kind, "apiVersion": f"{group}/{version}"})
        token = (page.get("metadata") or {}).get("continue") if isinstance(page, dict) else None
        if not token:
            return found


def _list_all(api_client: Any, lister: Callable[..., Any], kind: str, api_version: str,
              chunk: int, *, optional: bool = False) -> Iterator[dict[str, Any]]:
    """Every item of a list endpoint, following `continue` tokens, as plain dicts."""
    token: str | None = None
    while True:
        page = _call(lister, kind, optional=optional, limit=chunk, _continue=token)
        for item in page.items or []:
            obj = api_client.sanitize_for_serialization(item)
            obj["kind"], obj["apiVersion"] = kind, api_version
            yield obj
        token = page.metadata._continue if page.metadata is not None else None
        if not token:
            return


def _call(lister: Callable[..., Any], kind: str, *, optional: bool = False,
          **kwargs: Any) -> Any:
    """One list request; API and connection failures become one-line InputErrors (for an
    `optional` listing, 403 and 404 raise `_NotListable` instead)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if kwargs.get("_continue") is None:
        kwargs.pop("_continue", None)
    try:
        return lister(**kwargs)
    except ApiException as exc:
        if optional and exc.status in (403, 404):
            raise _NotListable(kind) from None
        raise InputError(f"kubernetes: listing {kind}s failed: HTTP {exc.status} "
                         f"{exc.reason or ''}".rstrip()) from None
    except (HTTPError, OSError) as exc:
        raise InputError(f"kubernetes: cannot reach the API server: {_one_line(exc)}") from None
    except ValueError as exc:  # the client's model validation of a malformed response
        raise InputError(f"kubernetes: unreadable {kind} list: {_one_line(exc)}") from None


def _is_audited(obj: dict[str, Any]) -> bool:
    kind = obj.get("kind")
    status = obj.get("status") or {}
    if kind == "Pod":
        if _controller_owned(obj):
            return False
        return status.get("phase") not in ("Succeeded", "Failed")
    if kind == "Job" or kind in TRAINING_JOB_KINDS:
        finished = {"Complete", "Failed", "Succeeded"}
        if status.get("jobDeploymentStatus") in finished:  # RayJob
            return False
        return not any(c.get("type") in finished and c.get("status") == "True"
                       for c in status.get("conditions") or [] if isinstance(c, dict))
    return True


def _controller_owned(obj: dict[str, Any]) -> bool:
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") is True for r in references)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source k8s`: the cluster of the kubeconfig context (or in-cluster)."""
    api_client = connect(kubeconfig=options.kubeconfig, context=options.context)
    cluster = current_cluster_name(kubeconfig=options.kubeconfig, context=options.context)
    state = list_cluster(api_client, cluster=cluster)
    return Collected(
        resources=cluster_resources(state, catalog),
        snapshot={"kubernetes": kubernetes_snapshot(state)},
        clients={"kubernetes": api_client},
    )
