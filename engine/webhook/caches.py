"""Cluster facts the webhook needs without network I/O on the request path.

Namespace labels (production is decided by them when a workload has no env label), the GPU
nodes (which GPU model a workload lands on, which MIG resources nodes offer) and the inventory
(`engine.webhook.inventory`: the kinds Rego policies declare for `data.inventory`, and the DRA
claims pods name) are listed from the API server in a background task every `resync` seconds;
requests only read the last snapshot.

Listing goes through a `Lister`: `KubernetesLister` uses the official `kubernetes` client
(imported lazily, only here); tests inject their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from engine.core.errors import InputError
from engine.sources.kubernetes import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    ClaimIndex,
)
from engine.webhook.inventory import (
    MAX_BYTES,
    MAX_OBJECTS,
    Gvk,
    Inventory,
    NotServed,
    read_inventory,
)

log = logging.getLogger("gpuwarden.webhook")
LIST_PAGE_SIZE = 500


class Lister(Protocol):
    """Lists cluster objects as API JSON dicts (the items of a NamespaceList / NodeList)."""

    def list_namespaces(self) -> list[dict[str, Any]]: ...

    def list_nodes(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    extended_resources: frozenset[str]  # nvidia.com/gpu, nvidia.com/mig-… offered (> 0)
    cloud: str | None = None  # whose spot label fits it (`spot_cloud_of`), None when unknown

    @property
    def gpu_product(self) -> str | None:
        return self.labels.get(GPU_PRODUCT_LABEL)


@dataclass(frozen=True, slots=True)
class Snapshot:
    namespaces: Mapping[str, Mapping[str, str]]
    nodes: tuple[NodeInfo, ...]
    listed_at: float
    inventory: Inventory = field(default_factory=Inventory)


class ClusterCache:
    """The last listed namespaces and GPU nodes. Reads are lock-free: a refresh swaps in a new
    immutable snapshot."""

    def __init__(self, lister: Lister | None, *, resync_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time):
        self.lister = lister
        self.resync_seconds = resync_seconds
        self.clock = clock
        self._snapshot: Snapshot | None = None
        self._refresh_wanted: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_refresh: Callable[[Snapshot], None] | None = None
        self.inventory_kinds: set[Gvk] = set()  # what the Rego policies declare
        self.dra_claims = True
        self.max_inventory_objects, self.max_inventory_bytes = MAX_OBJECTS, MAX_BYTES
        if lister is None:  # no cluster: nothing to wait for
            self._snapshot = Snapshot({}, (), clock())

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    # ------------------------------------------------------------------ reads (request path)

    def namespace_labels(self, namespace: str | None) -> dict[str, str] | None:
        """Labels of a namespace; None when it is not (yet) in the cache. A miss asks the
        background task for an early refresh instead of calling the API server here."""
        snapshot = self._snapshot
        if snapshot is None or namespace is None:
            return None
        labels = snapshot.namespaces.get(namespace)
        if labels is None:
            self.request_refresh()
            return None
        return dict(labels)

    def gpu_products(self, node_selector: Mapping[str, str]) -> set[str]:
        """GPU models (`nvidia.com/gpu.product`) of the GPU nodes a nodeSelector admits."""
        snapshot = self._snapshot
        if snapshot is None:
            return set()
        return {
            node.gpu_product
            for node in snapshot.nodes
            if node.gpu_product and _selects(node_selector, node.labels)
        }

    def offers(self, resource_name: str, node_selector: Mapping[str, str]) -> bool:
        """Whether some node the nodeSelector admits advertises the extended resource."""
        snapshot = self._snapshot
        return snapshot is not None and any(
            resource_name in node.extended_resources and _selects(node_selector, node.labels)
            for node in snapshot.nodes
        )

    def cloud(self) -> str | None:
        """The one cloud every listed GPU node runs on (by its providerID), else None."""
        snapshot = self._snapshot
        clouds = {node.cloud for node in snapshot.nodes} if snapshot is not None else set()
        return clouds.pop() if len(clouds) == 1 else None

    def claims(self) -> ClaimIndex:
        """The DRA ResourceClaims and ResourceClaimTemplates last listed."""
        snapshot = self._snapshot
        return snapshot.inventory.claims if snapshot is not None else {}

    def request_refresh(self) -> None:
        """Wake the background task early; callable from any thread (requests are judged in
        worker threads)."""
        if self._refresh_wanted is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to wake
                self._loop.call_soon_threadsafe(self._refresh_wanted.set)

    # ------------------------------------------------------------------ refresh (background)

    def refresh(self) -> Snapshot:
        """List everything once (blocking: run it in a thread) and swap the snapshot in."""
        if self.lister is None:
            assert self._snapshot is not None
            return self._snapshot
        namespaces = namespace_labels_of(self.lister.list_namespaces())
        nodes = tuple(gpu_nodes_of(self.lister.list_nodes()))
        inventory = Inventory()
        if hasattr(self.lister, "list_kind"):
            inventory = read_inventory(self.lister, self.inventory_kinds,  # type: ignore[arg-type]
                                       dra_claims=self.dra_claims,
                                       max_objects=self.max_inventory_objects,
                                       max_bytes=self.max_inventory_bytes)
        snapshot = Snapshot(namespaces, nodes, self.clock(), inventory)
        self._snapshot = snapshot
        if self.on_refresh is not None:
            self.on_refresh(snapshot)
        return snapshot

    async def run(self) -> None:
        """Refresh every `resync_seconds` (sooner after a namespace miss) until cancelled.
        Failures are logged and retried with backoff; the last good snapshot stays in use."""
        if self.lister is None:
            return
        self._refresh_wanted = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        backoff = 1.0
        while True:
            try:
                snapshot = await asyncio.to_thread(self.refresh)
                log.debug("cluster cache: %d namespaces, %d GPU nodes, %d inventory objects",
                          len(snapshot.namespaces), len(snapshot.nodes),
                          snapshot.inventory.objects)
                for gvk, why in snapshot.inventory.gaps.items():
                    log.warning("inventory: %s not replicated: %s", gvk, why)
                wait, backoff = self.resync_seconds, 1.0
            except Exception as exc:  # the API server being away must not stop the webhook
                log.warning("cluster cache refresh failed: %s", _one_line(exc))
                wait, backoff = min(backoff, self.resync_seconds), min(backoff * 2, 60.0)
            self._refresh_wanted.clear()
            try:
                await asyncio.wait_for(self._refresh_wanted.wait(), timeout=wait)
                await asyncio.sleep(min(1.0, wait))  # debounce a burst of misses
            except TimeoutError:
                pass


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


# ---------------------------------------------------------------------------- API JSON


def namespace_labels_of(items: Iterable[Any]) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for item in items:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if isinstance(name, str) and name:
            result[name] = _string_map(metadata.get("labels"))  # type: ignore[union-attr]
    return result


def gpu_nodes_of(items: Iterable[Any]) -> list[NodeInfo]:
    """Nodes that offer whole GPUs or MIG slices (allocatable > 0), or carry a GPU product."""
    nodes: list[NodeInfo] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        metadata = item.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str):
            continue
        labels = _string_map(metadata.get("labels"))  # type: ignore[union-attr]
        offered = _gpu_resources(item.get("status"))
        if offered or GPU_PRODUCT_LABEL in labels:
            nodes.append(NodeInfo(name, labels, offered, spot_cloud_of(item, labels)))
    return nodes


_PROVIDER_CLOUDS = {"aws": "eks", "gce": "gke", "azure": "azure"}


def spot_cloud_of(node: dict[str, Any], labels: Mapping[str, str]) -> str | None:
    """Whose spot label the mutating webhook should write for pods bound for this node: from
    its `spec.providerID` scheme (aws://, gce://, azure://); on AWS, Karpenter's label when
    Karpenter made the node, else the EKS managed node group's."""
    spec = node.get("spec")
    provider_id = spec.get("providerID") if isinstance(spec, dict) else None
    if not isinstance(provider_id, str) or "://" not in provider_id:
        return None
    cloud = _PROVIDER_CLOUDS.get(provider_id.split("://", 1)[0].lower())
    if cloud == "eks" and "karpenter.sh/capacity-type" in labels:
        return "aws"
    return cloud


def _gpu_resources(status: Any) -> frozenset[str]:
    allocatable = status.get("allocatable") if isinstance(status, dict) else None
    if not isinstance(allocatable, dict):
        return frozenset()
    return frozenset(
        name
        for name, amount in allocatable.items()
        if isinstance(name, str)
        and (name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX))
        and str(amount).strip() not in ("", "0")
    )


def _string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


# ---------------------------------------------------------------------------- real client


class StaticLister:
    """Fixed lists (tests, `--no-cluster` experiments); `objects` by (group, version, kind),
    with whether the kind is namespaced."""

    def __init__(self, namespaces: list[dict[str, Any]] | None = None,
                 nodes: list[dict[str, Any]] | None = None,
                 objects: Mapping[Gvk, tuple[bool, list[dict[str, Any]]]] | None = None):
        self.namespaces = namespaces or []
        self.nodes = nodes or []
        self.objects = dict(objects or {})

    def list_kind(self, gvk: Gvk) -> tuple[bool, list[dict[str, Any]]]:
        if gvk not in self.objects:
            raise NotServed(f"{gvk} is not served")
        namespaced, items = self.objects[gvk]
        return namespaced, list(items)

    def list_namespaces(self) -> list[dict[str, Any]]:
        return list(self.namespaces)

    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.nodes)


class KubernetesLister:
    """Chunked lists through the official client's CoreV1Api, raw API JSON (no model objects).

    `api_client` is a `kubernetes.client.ApiClient`; `from_environment()` builds one from the
    in-cluster service account, else the kubeconfig.
    """

    def __init__(self, api_client: Any, *, page_size: int = LIST_PAGE_SIZE,
                 request_timeout: float = 20.0):
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.page_size = page_size
        self.request_timeout = request_timeout

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> KubernetesLister:
        from kubernetes import client, config

        if kubeconfig is None:
            try:
                config.load_incluster_config()
                return cls(client.ApiClient())
            except config.ConfigException:
                pass
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    def list_namespaces(self) -> list[dict[str, Any]]:
        return self._all(self.core.list_namespace)

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._all(self.core.list_node)

    def list_kind(self, gvk: Gvk) -> tuple[bool, list[dict[str, Any]]]:
        """Any kind, by discovery (its resource name, whether it is namespaced), then chunked
        lists of all its objects."""
        base = f"/apis/{gvk.group}/{gvk.version}" if gvk.group else f"/api/{gvk.version}"
        resources = self._get(base).get("resources")
        entry = next((r for r in resources if isinstance(r, dict) and r.get("kind") == gvk.kind
                      and "/" not in str(r.get("name"))), None) \
            if isinstance(resources, list) else None
        if entry is None:
            raise NotServed(f"{gvk} is not served")
        items = self._all(lambda **kwargs: self._call(f"{base}/{entry['name']}", **kwargs),
                          max_items=MAX_OBJECTS + 1)  # past it the kind is left out anyway
        return bool(entry.get("namespaced")), items

    def _get(self, path: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            response = self._call(path, _request_timeout=self.request_timeout,
                                  _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                raise NotServed(f"{path} is not served") from None
            raise
        found = orjson.loads(response.data)
        return found if isinstance(found, dict) else {}

    def _call(self, path: str, *, _preload_content: bool = False,
              _request_timeout: float | None = None, limit: int | None = None,
              _continue: str | None = None) -> Any:
        """GET `path` through the official client (its auth, TLS and proxy settings)."""
        query: list[tuple[str, Any]] = [("limit", limit)] if limit else []
        if _continue:
            query.append(("continue", _continue))
        response, _, _ = self.api_client.call_api(
            path, "GET", query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=_preload_content,
            _request_timeout=_request_timeout)
        return response

    def _all(self, list_call: Callable[..., Any],
             max_items: int | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False,
                                      "_request_timeout": self.request_timeout}
            if token:
                kwargs["_continue"] = token
            response = list_call(**kwargs)
            page = orjson.loads(response.data)
            items.extend(i for i in page.get("items") or [] if isinstance(i, dict))
            token = (page.get("metadata") or {}).get("continue")
            if not token or (max_items is not None and len(items) >= max_items):
                return items


def cluster_cache(*, no_cluster: bool, kubeconfig: str | None = None,
                  resync_seconds: float = 30.0) -> ClusterCache:
    """The cache `gpuwarden webhook` runs with: empty without a cluster, else fed by the
    official client from the in-cluster service account or the kubeconfig."""
    if no_cluster:
        return ClusterCache(None)
    try:
        lister = KubernetesLister.from_environment(kubeconfig)
    except Exception as exc:  # the client's config errors have no common base class
        raise InputError(f"cannot configure the Kubernetes client: {_one_line(exc)} "
                         "(use --no-cluster to run without one)") from None
    return ClusterCache(lister, resync_seconds=resync_seconds)
