"""Live Azure source: subscriptions, VMs, managed disks and AKS agent pools → `Resource` models.

Reads through the official management clients: the subscriptions named (`--subscription`) or
every one the credential can see (azure-mgmt-resource-subscriptions), then per subscription
azure-mgmt-compute for virtual machines (two paged lists: the models, and `statusOnly=true` for
their power states, so the number of calls does not grow with the number of VMs) and managed
disks, and azure-mgmt-containerservice for AKS clusters with their agent pools when that package
is installed. Credentials come from `DefaultAzureCredential` (environment, workload or managed
identity, Azure CLI). The SDKs are imported inside functions only.

What it decides, and why (matching the Terraform adapter, so both doors give one verdict):

- **Ids** are the full ARM ids; `kind` is the Terraform type (`azurerm_linux_virtual_machine`,
  `azurerm_windows_virtual_machine`, `azurerm_managed_disk`,
  `azurerm_kubernetes_cluster_node_pool`) so advice names the attribute to change.
- **Capacity** is spot for `priority` Spot (or the older Low priority); AKS pools by their
  `scaleSetPriority`.
- **State** follows billing: a VM is stopped only when deallocated (or deallocating); a VM
  stopped from inside the OS keeps its hardware and its bill, so it counts as running.
- **Tags** are the resource's tags; the subscription's tags are the fallback for production.
  A disk carries the tags of the VM that manages it under its own; an AKS pool carries its
  cluster's tags and its node labels under its own tags.
- **Disks** are always platform-encrypted; `customer_key` when a disk encryption set (customer
  managed key) protects them.
- **Partial failures** (one subscription denied, throttled past the retries) become warnings and
  the scan goes on; when every subscription fails, the scan fails with the first reason.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.catalog import Catalog
from engine.enrich import enrich
from engine.errors import InputError, install_hint
from engine.model import Capacity, Category, Resource, State
from engine.sources.registry import Collected, ScanOptions
from engine.sources.snapshot import Count, Labels, ObjectShape, check_shape

if TYPE_CHECKING:
    from engine.sources.snapshot import SnapshotContext

LINUX_VM_KIND = "azurerm_linux_virtual_machine"
WINDOWS_VM_KIND = "azurerm_windows_virtual_machine"
DISK_KIND = "azurerm_managed_disk"
NODE_POOL_KIND = "azurerm_kubernetes_cluster_node_pool"

_SPOT_PRIORITIES = frozenset({"spot", "low"})
_STOPPED_POWER = frozenset({"deallocated", "deallocating"})
_CUSTOMER_KEY_TYPES = frozenset({"encryptionatrestwithcustomerkey",
                                 "encryptionatrestwithplatformandcustomerkeys"})
_DISABLED_SUBSCRIPTIONS = frozenset({"disabled", "deleted"})
_ARM_ID = re.compile(r"^/subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/"
                     r"providers/(?P<namespace>[^/]+)/(?P<type>[^/]+)/(?P<name>[^/]+)",
                     re.IGNORECASE)


@dataclass(frozen=True)
class AzureSettings:
    """How to reach Azure Resource Manager. Tests point `base_url` at a loopback server."""

    credential: Any = None  # None: DefaultAzureCredential
    base_url: str | None = None  # None: the public cloud's management endpoint
    # passed to every client: transport and retry options (connection_verify, retry_total, ...)
    client_kwargs: Mapping[str, Any] = field(default_factory=dict)


# The settings `collect` connects with; replace them to point the source elsewhere.
SETTINGS = AzureSettings()


class AzureClients:
    """Management clients of one scan, made per subscription on first use and kept; the
    remediation executor reuses them."""

    def __init__(self, credential: Any, base_url: str | None = None,
                 client_kwargs: Mapping[str, Any] | None = None) -> None:
        self.credential = credential
        self.base_url = base_url
        self.client_kwargs = dict(client_kwargs or {})
        self._made: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _client(self, kind: str, subscription: str) -> Any:
        with self._lock:
            key = (kind, subscription)
            if key not in self._made:
                self._made[key] = self._make(kind, subscription)
            return self._made[key]

    def _make(self, kind: str, subscription: str) -> Any:
        extra: dict[str, Any] = dict(self.client_kwargs)
        if self.base_url:
            extra["base_url"] = self.base_url
        if kind == "subscriptions":
            from azure.mgmt.resource.subscriptions import SubscriptionClient

            return SubscriptionClient(self.credential, **extra)
        if kind == "compute":
            from azure.mgmt.compute import ComputeManagementClient

            return ComputeManagementClient(self.credential, subscription, **extra)
        if kind == "resources":
            from azure.mgmt.resource.resources import ResourceManagementClient

            return ResourceManagementClient(self.credential, subscription, **extra)
        from azure.mgmt.containerservice import ContainerServiceClient

        return ContainerServiceClient(self.credential, subscription, **extra)

    def subscriptions(self) -> Any:
        return self._client("subscriptions", "")

    def compute(self, subscription: str) -> Any:
        return self._client("compute", subscription)

    def resources(self, subscription: str) -> Any:
        return self._client("resources", subscription)

    def containers(self, subscription: str) -> Any:
        return self._client("containers", subscription)


@dataclass
class SubscriptionEstate:
    """One subscription as listed: its objects as the ARM API serves them (camelCase JSON)."""

    subscription: dict[str, Any]
    virtual_machines: list[dict[str, Any]] = field(default_factory=list)
    disks: list[dict[str, Any]] = field(default_factory=list)
    managed_clusters: list[dict[str, Any]] = field(default_factory=list)

    @property
    def subscription_id(self) -> str:
        return str(self.subscription.get("subscriptionId") or "")


# ---------------------------------------------------------------------------- connecting


def connect(settings: AzureSettings | None = None) -> AzureClients:
    settings = settings or SETTINGS
    try:  # fail early, with the extra to install, rather than once per subscription
        import azure.mgmt.compute
        import azure.mgmt.resource.resources
        import azure.mgmt.resource.subscriptions  # noqa: F401
        from azure.identity import DefaultAzureCredential
    except ModuleNotFoundError as exc:
        raise InputError(f"source 'azure' needs a package that is not installed: {exc.name} "
                         f"({install_hint('azure')})") from None
    credential = settings.credential or DefaultAzureCredential()
    return AzureClients(credential, settings.base_url, settings.client_kwargs)


# ---------------------------------------------------------------------------- errors


class SubscriptionFailed(Exception):
    """One subscription could not be listed; `auth` when the credential was refused."""

    def __init__(self, message: str, *, auth: bool) -> None:
        super().__init__(message)
        self.auth = auth


def describe_error(exc: BaseException) -> tuple[str, bool]:
    """One line for an API or credential failure, and whether it is an auth failure."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
    )

    if isinstance(exc, ClientAuthenticationError):
        return f"credentials rejected or unavailable: {_error_message(exc)}", True
    if isinstance(exc, ResourceNotFoundError):
        return f"not found (HTTP 404): {_error_message(exc)}", False
    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        if status == 403:
            return f"permission denied (HTTP 403): {_error_message(exc)}", True
        if status == 429:
            return f"throttled (HTTP 429) after retries: {_error_message(exc)}", False
        return f"API error (HTTP {status}): {_error_message(exc)}", False
    if isinstance(exc, ServiceRequestError):
        return f"cannot reach Azure Resource Manager: {_first_line(exc)}", False
    return f"unexpected failure: {_first_line(exc)}", False


def _error_message(exc: Any) -> str:
    error = getattr(exc, "error", None)
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if message:
        return _first_line(f"{code}: {message}" if code else message)
    return _first_line(getattr(exc, "message", None) or exc)


def _first_line(value: object) -> str:
    text = " ".join(str(value).split())
    return text[:300] or "no detail"


# ---------------------------------------------------------------------------- listing


def plain(model: Any) -> dict[str, Any]:
    """An SDK model as the ARM API's JSON object (camelCase keys, `properties` nesting)."""
    serialize = getattr(model, "serialize", None)
    if callable(serialize):  # msrest-based SDK versions
        found: dict[str, Any] = serialize(keep_readonly=True)
        return found
    return dict(model.as_dict())


def list_subscriptions(clients: AzureClients, wanted: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The subscriptions to scan: those named (with their tags when readable), else every
    enabled one the credential can see."""
    names = [s for s in wanted if s]
    if names:
        return [_named_subscription(clients, name) for name in names]
    try:
        found = [plain(s) for s in clients.subscriptions().subscriptions.list()]
    except Exception as exc:
        message, _ = describe_error(exc)
        raise InputError(f"azure: cannot list subscriptions: {message}") from None
    return [s for s in found if str(s.get("state") or "").lower() not in _DISABLED_SUBSCRIPTIONS]


def _named_subscription(clients: AzureClients, subscription_id: str) -> dict[str, Any]:
    from azure.core.exceptions import ClientAuthenticationError

    try:
        return plain(clients.subscriptions().subscriptions.get(subscription_id))
    except ClientAuthenticationError as exc:
        message, _ = describe_error(exc)
        raise InputError(f"azure: {message}") from None
    except Exception:
        return {"subscriptionId": subscription_id}


def list_subscription(clients: AzureClients,
                      subscription: dict[str, Any]) -> tuple[SubscriptionEstate, list[str]]:
    """VMs (with power state), disks and AKS clusters of one subscription, and its warnings.

    Raises SubscriptionFailed when the VMs or disks cannot be listed; AKS failures are warnings.
    """
    estate = SubscriptionEstate(subscription=subscription)
    sub = estate.subscription_id
    try:
        compute = clients.compute(sub)
        estate.virtual_machines = [plain(vm) for vm in compute.virtual_machines.list_all()]
        views = {str(vm.get("id") or "").lower(): (vm.get("properties") or {}).get("instanceView")
                 for vm in map(plain, compute.virtual_machines.list_all(status_only="true"))}
        for vm in estate.virtual_machines:
            view = views.get(str(vm.get("id") or "").lower())
            if view is not None:
                vm.setdefault("properties", {})["instanceView"] = view
        estate.disks = [plain(disk) for disk in compute.disks.list()]
    except Exception as exc:
        message, auth = describe_error(exc)
        raise SubscriptionFailed(f"azure: subscription {sub}: {message}; skipped",
                                 auth=auth) from exc
    return estate, _list_clusters(clients, estate)


def _list_clusters(clients: AzureClients, estate: SubscriptionEstate) -> list[str]:
    sub = estate.subscription_id
    try:
        containers = clients.containers(sub)
    except ModuleNotFoundError:
        return [f"azure: subscription {sub}: AKS node pools not scanned "
                f"({install_hint('azure')})"]
    try:
        estate.managed_clusters = [plain(c) for c in containers.managed_clusters.list()]
    except Exception as exc:
        message, _ = describe_error(exc)
        return [f"azure: subscription {sub}: AKS clusters: {message}; skipped"]
    return []


def list_estate(clients: AzureClients, subscriptions: list[dict[str, Any]],
                max_workers: int = 8) -> tuple[list[SubscriptionEstate], list[str]]:
    """Every subscription listed (concurrently, in a bounded pool); failures become warnings.

    Raises InputError when there is nothing to scan or every subscription failed.
    """
    if not subscriptions:
        raise InputError("azure: no enabled subscriptions visible to this credential (name "
                         "them with --subscription)")
    workers = max(1, min(max_workers, len(subscriptions)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(lambda s: _try_subscription(clients, s), subscriptions))
    estates: list[SubscriptionEstate] = []
    warnings: list[str] = []
    failures: list[SubscriptionFailed] = []
    for outcome in outcomes:
        if isinstance(outcome, SubscriptionFailed):
            failures.append(outcome)
            warnings.append(str(outcome))
        else:
            estates.append(outcome[0])
            warnings.extend(outcome[1])
    if failures and not estates:
        reason = str(failures[0]).removesuffix("; skipped")
        more = f" (and {len(failures) - 1} more subscriptions)" if len(failures) > 1 else ""
        raise InputError(f"{reason}{more}")
    return estates, warnings


def _try_subscription(
    clients: AzureClients, subscription: dict[str, Any]
) -> tuple[SubscriptionEstate, list[str]] | SubscriptionFailed:
    try:
        return list_subscription(clients, subscription)
    except SubscriptionFailed as failed:
        return failed


# ---------------------------------------------------------------------------- normalizing


@dataclass(frozen=True, slots=True)
class ArmId:
    subscription: str
    resource_group: str
    name: str


def parse_arm_id(resource_id: str) -> ArmId | None:
    found = _ARM_ID.match(resource_id)
    if found is None:
        return None
    return ArmId(found.group("subscription"), found.group("group"), found.group("name"))


def power_state(vm: Mapping[str, Any]) -> str | None:
    """`running`, `deallocated`, ... from the instance view's PowerState/* status."""
    view = (vm.get("properties") or {}).get("instanceView") or {}
    for status in view.get("statuses") or []:
        code = str(status.get("code") or "")
        if code.lower().startswith("powerstate/"):
            return code.split("/", 1)[1].lower()
    return None


def vm_state(vm: Mapping[str, Any]) -> State:
    power = power_state(vm)
    if power is None:
        return State.UNKNOWN
    return State.STOPPED if power in _STOPPED_POWER else State.RUNNING


def _tags(obj: Mapping[str, Any], key: str = "tags") -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.get(key) or {}).items()}


def _spot(priority: Any) -> Capacity:
    return Capacity.SPOT if str(priority or "").lower() in _SPOT_PRIORITIES else Capacity.ON_DEMAND


def vm_resource(vm: dict[str, Any], estate: SubscriptionEstate, catalog: Catalog) -> Resource:
    properties = vm.get("properties") or {}
    os_type = ((properties.get("storageProfile") or {}).get("osDisk") or {}).get("osType")
    resource = Resource(
        provider="azure",
        kind=WINDOWS_VM_KIND if str(os_type).lower() == "windows" else LINUX_VM_KIND,
        category=Category.INSTANCE,
        id=str(vm.get("id") or ""),
        name=str(vm.get("name") or ""),
        region=vm.get("location"),
        account=estate.subscription_id or None,
        tags=_tags(vm),
        namespace_labels=_tags(estate.subscription),
        instance_type=(properties.get("hardwareProfile") or {}).get("vmSize"),
        capacity=_spot(properties.get("priority")),
        state=vm_state(vm),
        raw=vm,
    )
    return enrich(resource, catalog)


def disk_customer_key(disk: Mapping[str, Any]) -> bool:
    properties = disk.get("properties") or {}
    encryption = properties.get("encryption") or {}
    security = properties.get("securityProfile") or {}
    return (str(encryption.get("type") or "").lower() in _CUSTOMER_KEY_TYPES
            or bool(encryption.get("diskEncryptionSetId"))
            or bool(security.get("secureVMDiskEncryptionSetId")))


def disk_resource(disk: dict[str, Any], estate: SubscriptionEstate,
                  vm_tags: Mapping[str, dict[str, str]]) -> Resource:
    manager = str(disk.get("managedBy") or "")
    attached = str((disk.get("properties") or {}).get("diskState") or "").lower() != "unattached"
    return Resource(
        provider="azure",
        kind=DISK_KIND,
        category=Category.VOLUME,
        id=str(disk.get("id") or ""),
        name=str(disk.get("name") or ""),
        region=disk.get("location"),
        account=estate.subscription_id or None,
        tags={**vm_tags.get(manager.lower(), {}), **_tags(disk)},
        namespace_labels=_tags(estate.subscription),
        encrypted=True,
        customer_key=disk_customer_key(disk),
        state=State.RUNNING if attached and manager else State.STOPPED,
        raw=disk,
    )


def node_pool_resources(cluster: dict[str, Any], estate: SubscriptionEstate,
                        catalog: Catalog) -> list[Resource]:
    properties = cluster.get("properties") or {}
    cluster_stopped = str((properties.get("powerState") or {}).get("code") or "") == "Stopped"
    found: list[Resource] = []
    for pool in properties.get("agentPoolProfiles") or []:
        count = int(pool.get("count") or 0)
        stopped = cluster_stopped or count == 0 or \
            str((pool.get("powerState") or {}).get("code") or "") == "Stopped"
        resource = Resource(
            provider="azure",
            kind=NODE_POOL_KIND,
            category=Category.NODE_GROUP,
            id=f"{cluster.get('id')}/agentPools/{pool.get('name')}",
            name=str(pool.get("name") or ""),
            region=cluster.get("location"),
            account=estate.subscription_id or None,
            cluster=str(cluster.get("name") or "") or None,
            tags={**_tags(cluster), **_tags(pool, "nodeLabels"), **_tags(pool)},
            namespace_labels=_tags(estate.subscription),
            instance_type=pool.get("vmSize"),
            count=count,
            capacity=_spot(pool.get("scaleSetPriority")),
            state=State.STOPPED if stopped else State.RUNNING,
            raw={"cluster": cluster.get("id"), "pool": pool},
        )
        found.append(enrich(resource, catalog))
    return found


def estate_resources(estates: Iterable[SubscriptionEstate], catalog: Catalog) -> list[Resource]:
    found: list[Resource] = []
    for estate in estates:
        vms = [vm_resource(vm, estate, catalog) for vm in estate.virtual_machines]
        tags = {vm.id.lower(): vm.tags for vm in vms}
        found.extend(vms)
        found.extend(disk_resource(disk, estate, tags) for disk in estate.disks)
        for cluster in estate.managed_clusters:
            found.extend(node_pool_resources(cluster, estate, catalog))
    return found


# ---------------------------------------------------------------------------- snapshots

class _Code(ObjectShape):
    code: str | None = None


class _Located(ObjectShape):
    id: str | None = None
    name: str | None = None
    location: str | None = None
    tags: Labels | None = None


class _VmProperties(ObjectShape):
    class _Storage(ObjectShape):
        class _OsDisk(ObjectShape):
            osType: str | None = None

        osDisk: _OsDisk | None = None

    class _Hardware(ObjectShape):
        vmSize: str | None = None

    class _InstanceView(ObjectShape):
        statuses: list[_Code] | None = None

    storageProfile: _Storage | None = None
    hardwareProfile: _Hardware | None = None
    instanceView: _InstanceView | None = None
    priority: str | None = None


class _VirtualMachine(_Located):
    properties: _VmProperties | None = None


class _DiskProperties(ObjectShape):
    class _Encryption(ObjectShape):
        type: str | None = None
        diskEncryptionSetId: str | None = None

    class _Security(ObjectShape):
        secureVMDiskEncryptionSetId: str | None = None

    diskState: str | None = None
    encryption: _Encryption | None = None
    securityProfile: _Security | None = None


class _Disk(_Located):
    managedBy: str | None = None
    properties: _DiskProperties | None = None


class _AgentPool(ObjectShape):
    name: str | None = None
    count: Count | None = None
    vmSize: str | None = None
    scaleSetPriority: str | None = None
    powerState: _Code | None = None
    nodeLabels: Labels | None = None
    tags: Labels | None = None


class _ClusterProperties(ObjectShape):
    powerState: _Code | None = None
    agentPoolProfiles: list[_AgentPool] | None = None


class _ManagedCluster(_Located):
    properties: _ClusterProperties | None = None


class _Subscription(ObjectShape):
    subscriptionId: str | None = None
    tags: Labels | None = None


_SECTION_SHAPES: dict[str, type[ObjectShape]] = {
    "virtual_machines": _VirtualMachine, "disks": _Disk, "managed_clusters": _ManagedCluster,
}
_SECTION_LISTS = tuple(_SECTION_SHAPES)


def azure_snapshot(estates: Iterable[SubscriptionEstate]) -> dict[str, Any]:
    """The `azure:` section of a snapshot bundle."""
    return {"subscriptions": [{"subscription": e.subscription,
                               "virtual_machines": e.virtual_machines, "disks": e.disks,
                               "managed_clusters": e.managed_clusters} for e in estates]}


def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `azure: {subscriptions: [{subscription, virtual_machines, disks,
    managed_clusters}]}`."""
    return estate_resources(_estates_from_section(value, ctx.file), ctx.catalog)


def _estates_from_section(value: Any, file: str) -> list[SubscriptionEstate]:
    if not isinstance(value, Mapping) or not isinstance(value.get("subscriptions"), list):
        raise InputError("azure must be a mapping with a 'subscriptions' list", file=file)
    estates: list[SubscriptionEstate] = []
    for index, entry in enumerate(value["subscriptions"]):
        where = f"azure.subscriptions[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("subscription"), Mapping):
            raise InputError(f"{where} needs a 'subscription' mapping", file=file)
        check_shape(_Subscription, entry["subscription"], f"{where}.subscription", file)
        lists = {key: entry.get(key) or [] for key in _SECTION_LISTS}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise InputError(f"{where}.{key} must be a list of objects", file=file)
            for position, item in enumerate(items):
                check_shape(_SECTION_SHAPES[key], item, f"{where}.{key}[{position}]", file)
        estates.append(SubscriptionEstate(
            dict(entry["subscription"]), *([dict(i) for i in lists[k]] for k in _SECTION_LISTS)))
    return estates


# ---------------------------------------------------------------------------- the source


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source azure` (or `azure:SUBSCRIPTION[,SUBSCRIPTION]`): those named, else all visible."""
    clients = connect()
    wanted = [s.strip() for s in arg.split(",")] if arg else list(options.subscriptions)
    subscriptions = list_subscriptions(clients, wanted)
    estates, warnings = list_estate(clients, subscriptions, options.max_workers)
    return Collected(
        resources=estate_resources(estates, catalog),
        snapshot={"azure": azure_snapshot(estates)},
        clients={"azure": clients},
        warnings=warnings,
    )
