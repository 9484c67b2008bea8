"""Azure: the official management clients against a loopback ARM server over real TLS.

The Azure SDK refuses bearer tokens over plain HTTP, so the server speaks HTTPS with a
certificate from a test CA (`trustme`) that the clients trust through `connection_verify`. The
estate is built from the SDK's own models (`VirtualMachine`, `Disk`, `ManagedCluster`,
`Subscription`, `TagsResource`) and served as their ARM JSON (`as_dict()`), so field names and
nesting are the API's: `value` + `nextLink` paging, `statusOnly=true` power states, 202 with
`Azure-AsyncOperation` for deallocate, the Tags API's Merge, ARM error bodies with 401/403/429
and Retry-After. Every request is recorded, so the tests can assert what was (and was not) sent.
"""

from __future__ import annotations

import copy
import json
import ssl
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.resource.subscriptions")
trustme = pytest.importorskip("trustme")

from azure.core.credentials import AccessToken  # noqa: E402
from azure.core.exceptions import ClientAuthenticationError  # noqa: E402
from azure.mgmt.compute import models as cm  # noqa: E402
from azure.mgmt.containerservice import models as km  # noqa: E402
from azure.mgmt.resource.resources import models as rm  # noqa: E402
from azure.mgmt.resource.subscriptions import models as sm  # noqa: E402

from engine.core.catalog import builtin_catalog  # noqa: E402
from engine.core.errors import InputError  # noqa: E402
from engine.core.model import Capacity, Category, State  # noqa: E402
from engine.sources import azure  # noqa: E402
from engine.sources.azure import vm_sizes  # noqa: E402
from engine.sources.registry import ScanOptions  # noqa: E402
from engine.sources.snapshot import load_snapshot_resources, read_snapshot  # noqa: E402
from remediations.azure_actions import VIOLATION_TAG, apply_azure_remediations  # noqa: E402
from tests.conftest import BUSINESS_HOURS, OFF_HOURS, run_cli  # noqa: E402

DEV = "6f1d3a52-8c4e-4b7a-9d21-0a3e5c7b9f10"
PROD = "a2c4e6f8-1b3d-4f5a-8c7e-9d0b2a4c6e81"
LOCKED = "0c9e8d7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
COST_TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-4711"}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
FIXTURES = Path(__file__).parent / "fixtures" / "azure"


# ---------------------------------------------------------------------------- estate (SDK models)


def arm_id(subscription: str, group: str, kind: str, name: str) -> str:
    return f"/subscriptions/{subscription}/resourceGroups/{group}/providers/{kind}/{name}"


def vm_id(subscription: str, name: str, group: str = "rg-ml") -> str:
    return arm_id(subscription, group, "Microsoft.Compute/virtualMachines", name)


def disk_id(subscription: str, name: str, group: str = "rg-ml") -> str:
    return arm_id(subscription, group, "Microsoft.Compute/disks", name)


def virtual_machine(subscription: str, name: str, size: str, *, power: str = "running",
                    priority: str = "Regular", tags: dict[str, str] | None = None,
                    os_type: str = "Linux", location: str = "eastus") -> cm.VirtualMachine:
    spot = priority == "Spot"
    properties = cm.VirtualMachineProperties(
        vm_id=f"00000000-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
        hardware_profile=cm.HardwareProfile(vm_size=size),
        priority=priority,
        eviction_policy="Deallocate" if spot else None,
        billing_profile=cm.BillingProfile(max_price=-1) if spot else None,
        storage_profile=cm.StorageProfile(os_disk=cm.OSDisk(
            os_type=os_type, name=f"{name}_OsDisk", create_option="FromImage", caching="ReadWrite",
            managed_disk=cm.ManagedDiskParameters(id=disk_id(subscription, f"{name}_OsDisk"),
                                                  storage_account_type="Premium_LRS"))),
        provisioning_state="Succeeded",
        instance_view=cm.VirtualMachineInstanceView(statuses=[
            cm.InstanceViewStatus(code="ProvisioningState/succeeded", level="Info",
                                  display_status="Provisioning succeeded"),
            cm.InstanceViewStatus(code=f"PowerState/{power}", level="Info",
                                  display_status=f"VM {power}"),
        ]),
    )
    return cm.VirtualMachine(id=vm_id(subscription, name), name=name, location=location,
                             type="Microsoft.Compute/virtualMachines", tags=tags or {},
                             properties=properties)


def managed_disk(subscription: str, name: str, *, managed_by: str | None = None,
                 encryption: str = "EncryptionAtRestWithPlatformKey", des: str | None = None,
                 tags: dict[str, str] | None = None) -> cm.Disk:
    return cm.Disk(
        id=disk_id(subscription, name), name=name, location="eastus", tags=tags or {},
        type="Microsoft.Compute/disks", managed_by=managed_by,
        sku=cm.DiskSku(name="Premium_LRS"),
        properties=cm.DiskProperties(
            creation_data=cm.CreationData(create_option="Empty"), disk_size_gb=1024,
            encryption=cm.Encryption(type=encryption, disk_encryption_set_id=des),
            disk_state="Attached" if managed_by else "Unattached",
            provisioning_state="Succeeded"),
    )


def agent_pool(name: str, size: str, count: int, *, spot: bool = False, mode: str = "User",
               labels: dict[str, str] | None = None) -> km.ManagedClusterAgentPoolProfile:
    return km.ManagedClusterAgentPoolProfile(
        name=name, count=count, vm_size=size, os_type="Linux", mode=mode,
        type="VirtualMachineScaleSets", scale_set_priority="Spot" if spot else "Regular",
        scale_set_eviction_policy="Delete" if spot else None,
        node_labels=labels or {}, power_state=km.PowerState(code="Running"),
        provisioning_state="Succeeded")


def cluster(subscription: str, name: str, pools: list[km.ManagedClusterAgentPoolProfile],
            tags: dict[str, str]) -> km.ManagedCluster:
    return km.ManagedCluster(
        id=arm_id(subscription, "rg-aks", "Microsoft.ContainerService/managedClusters", name),
        name=name, location="westeurope", type="Microsoft.ContainerService/ManagedClusters",
        tags=tags, properties=km.ManagedClusterProperties(
            kubernetes_version="1.30.5", dns_prefix=name, power_state=km.PowerState(code="Running"),
            agent_pool_profiles=pools, provisioning_state="Succeeded"))


def subscription(sub: str, name: str, tags: dict[str, str]) -> sm.Subscription:
    return sm.Subscription(id=f"/subscriptions/{sub}", subscription_id=sub, display_name=name,
                           state="Enabled", tenant_id=TENANT, tags=tags)


@dataclass
class SubscriptionState:
    subscription: sm.Subscription
    vms: list[cm.VirtualMachine] = field(default_factory=list)
    disks: list[cm.Disk] = field(default_factory=list)
    clusters: list[km.ManagedCluster] = field(default_factory=list)


def estate() -> dict[str, SubscriptionState]:
    des = arm_id(DEV, "rg-keys", "Microsoft.Compute/diskEncryptionSets", "des-gpu")
    return {
        DEV: SubscriptionState(
            subscription(DEV, "ml-dev", {"env": "dev"}),
            vms=[
                virtual_machine(DEV, "train-a100", "Standard_NC24ads_A100_v4", tags=COST_TAGS),
                virtual_machine(DEV, "spot-t4", "Standard_NC4as_T4_v3", priority="Spot",
                                tags={"team": "vision"}),
                # stopped from inside the OS: still allocated, still billed
                virtual_machine(DEV, "win-v100", "Standard_NC24s_v3", power="stopped",
                                os_type="Windows", tags=COST_TAGS),
                virtual_machine(DEV, "idle-a10", "Standard_NV36ads_A10_v5", power="deallocated",
                                tags=COST_TAGS),
                virtual_machine(DEV, "web", "Standard_D4s_v5"),
            ],
            disks=[
                managed_disk(DEV, "train-a100_OsDisk", managed_by=vm_id(DEV, "train-a100")),
                managed_disk(DEV, "spot-t4_OsDisk", managed_by=vm_id(DEV, "spot-t4"),
                             encryption="EncryptionAtRestWithPlatformAndCustomerKeys", des=des),
                managed_disk(DEV, "datasets", encryption="EncryptionAtRestWithCustomerKey",
                             des=des, tags={"team": "ml"}),
                managed_disk(DEV, "scratch", tags={"team": "ml"}),
            ],
            clusters=[cluster(DEV, "aks-ml", [
                agent_pool("system", "Standard_D4s_v5", 3, mode="System"),
                agent_pool("gpuspot", "Standard_NC24ads_A100_v4", 2, spot=True,
                           labels={"team": "ml", "project": "llm", "cost-center": "cc-4711"}),
                agent_pool("gpu", "Standard_NC4as_T4_v3", 1),
            ], tags={"team": "ml", "project": "llm", "cost-center": "cc-4711"})],
        ),
        PROD: SubscriptionState(
            subscription(PROD, "ml-prod", {"Environment": "Production"}),
            vms=[virtual_machine(PROD, "serving", "Standard_NC24ads_A100_v4", tags=COST_TAGS)],
        ),
        LOCKED: SubscriptionState(subscription(LOCKED, "finance", {})),
    }


# ---------------------------------------------------------------------------- loopback ARM server


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeArm:
    subscriptions: dict[str, SubscriptionState]
    requests: list[Recorded] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=lambda: {LOCKED})
    locked: set[str] = field(default_factory=set)  # VMs whose deallocate answers 403
    throttled: dict[str, int] = field(default_factory=dict)  # subscription → 429s still due
    reject_all: bool = False
    skus: list[dict[str, Any]] = field(default_factory=list)  # Microsoft.Compute/skus
    page_size: int = 2
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mutations(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in MUTATING]

    def vm(self, resource_id: str) -> cm.VirtualMachine | None:
        for state in self.subscriptions.values():
            for vm in state.vms:
                if vm.id.lower() == resource_id.lower():
                    return vm
        return None

    def resource(self, resource_id: str) -> Any:
        for state in self.subscriptions.values():
            for item in [*state.vms, *state.disks]:
                if item.id.lower() == resource_id.lower():
                    return item
        return None


def _arm_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def set_power(vm: cm.VirtualMachine, power: str) -> None:
    statuses = vm.properties.instance_view.statuses
    statuses[-1] = cm.InstanceViewStatus(code=f"PowerState/{power}", level="Info",
                                         display_status=f"VM {power}")


def make_handler(api: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: dict[str, Any] | None,
                  headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode() if payload is not None else b""
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-ms-request-id", f"req-{len(api.requests)}")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with api.lock:
                api.requests.append(Recorded(self.command, url.path, query,
                                             json.loads(raw) if raw else None))
                self._route(url.path, query)

        do_GET = do_POST = do_PATCH = do_PUT = _handle

        def _route(self, path: str, query: dict[str, list[str]]) -> None:
            if api.reject_all or self.headers.get("Authorization") != "Bearer test-token":
                return self._send(401, _arm_error(
                    "InvalidAuthenticationToken", "The access token is invalid."))
            if "api-version" not in query:
                return self._send(400, _arm_error("MissingApiVersionParameter",
                                                  "The api-version query parameter is required."))
            parts = path.strip("/").split("/")
            if parts == ["subscriptions"]:
                return self._page([s.subscription.as_dict() for s in api.subscriptions.values()],
                                  path, query)
            sub = parts[1] if len(parts) > 1 else ""
            state = api.subscriptions.get(sub)
            if state is None:
                return self._send(404, _arm_error("SubscriptionNotFound",
                                                  f"The subscription '{sub}' could not be found."))
            if len(parts) == 2:
                return self._send(200, state.subscription.as_dict())
            if sub in api.forbidden:
                return self._send(403, _arm_error(
                    "AuthorizationFailed", "The client 'gpuwarden' with object id "
                    "'11111111-2222-3333-4444-555555555555' does not have authorization to "
                    "perform action 'Microsoft.Compute/virtualMachines/read' over scope "
                    f"'/subscriptions/{sub}' or the scope is invalid."))
            if api.throttled.get(sub):
                api.throttled[sub] -= 1
                return self._send(429, _arm_error(
                    "TooManyRequests", "The request is being throttled as the limit has been "
                    "reached for operation type - Read_30Min."), {"Retry-After": "0"})
            if "/providers/Microsoft.Resources/tags/default" in path:
                return self._tags(path.split("/providers/Microsoft.Resources/tags/default")[0])
            listing = "/".join(parts[2:])
            if listing == "providers/Microsoft.Compute/virtualMachines":
                status_only = query.get("statusOnly") == ["true"]
                return self._page([self._vm_json(vm, status_only) for vm in state.vms], path,
                                  query)
            if listing == "providers/Microsoft.Compute/skus":
                wanted = (query.get("$filter") or [""])[0]
                return self._page([k for k in api.skus
                                   if f"location eq '{k['locations'][0]}'" == wanted],
                                  path, query)
            if listing == "providers/Microsoft.Compute/disks":
                return self._page([d.as_dict() for d in state.disks], path, query)
            if listing == "providers/Microsoft.ContainerService/managedClusters":
                return self._page([c.as_dict() for c in state.clusters], path, query)
            if len(parts) >= 8 and parts[5:7] == ["Microsoft.Compute", "virtualMachines"]:
                return self._vm_action("/" + "/".join(parts[:8]), parts[8:])
            if len(parts) == 10 and parts[6:9:2] == ["managedClusters", "agentPools"]:
                return self._agent_pool(state, parts[7], parts[9], path)
            return self._send(404, _arm_error("ResourceNotFound", f"{path} was not found."))

        def _vm_json(self, vm: cm.VirtualMachine, with_status: bool) -> dict[str, Any]:
            found = copy.deepcopy(vm.as_dict())
            if not with_status:
                found["properties"].pop("instanceView", None)
            return found

        def _page(self, items: list[dict[str, Any]], path: str,
                  query: dict[str, list[str]]) -> None:
            start = int((query.get("$skiptoken") or ["0"])[0])
            body: dict[str, Any] = {"value": items[start:start + api.page_size]}
            if start + api.page_size < len(items):
                rest = "&".join(f"{k}={v[0]}" for k, v in query.items() if k != "$skiptoken")
                body["nextLink"] = (f"{api.url}{path}?{rest}&$skiptoken="
                                    f"{start + api.page_size}")
            self._send(200, body)

        def _vm_action(self, resource_id: str, verb: list[str]) -> None:
            vm = api.vm(resource_id)
            if vm is None:
                return self._send(404, _arm_error(
                    "ResourceNotFound", f"The Resource '{resource_id}' was not found."))
            if self.command == "GET" and verb == ["instanceView"]:
                return self._send(200, vm.properties.instance_view.as_dict())
            if self.command == "POST" and vm.name in api.locked:
                return self._send(403, _arm_error(
                    "AuthorizationFailed", "The client 'gpuwarden' does not have authorization "
                    "to perform action 'Microsoft.Compute/virtualMachines/deallocate/action' over "
                    f"scope '{resource_id}'."))
            if self.command == "POST" and verb in (["deallocate"], ["start"]):
                set_power(vm, "deallocating" if verb == ["deallocate"] else "starting")
                operation = f"{api.url}/subscriptions/x/providers/Microsoft.Compute/locations/" \
                            f"eastus/operations/op-{len(api.requests)}?api-version=2024-11-01"
                return self._send(202, None, {"Azure-AsyncOperation": operation,
                                              "Location": operation, "Retry-After": "10"})
            return self._send(405, _arm_error("MethodNotAllowed", "not supported"))

        def _agent_pool(self, state: SubscriptionState, cluster_name: str, name: str,
                        path: str) -> None:
            """GET an agent pool, or PUT it whole (count, autoscaler, tags)."""
            pools = [pool for found in state.clusters if found.name == cluster_name
                     for pool in found.properties.agent_pool_profiles if pool.name == name]
            if not pools:
                return self._send(404, _arm_error("NotFound", f"{path} was not found."))
            pool = pools[0]
            if self.command == "PUT":
                body = (api.requests[-1].body or {}).get("properties") or {}
                pool.count, pool.tags = body.get("count"), body.get("tags") or {}
                pool.enable_auto_scaling = body.get("enableAutoScaling")
                pool.min_count, pool.max_count = body.get("minCount"), body.get("maxCount")
            fields = {key: getattr(pool, key) for key in (
                "count", "vm_size", "os_type", "mode", "type", "scale_set_priority",
                "node_labels", "tags", "enable_auto_scaling", "min_count", "max_count",
                "power_state", "provisioning_state")}
            self._send(200, km.AgentPool(id=path, name=name, **fields).as_dict())

        def _tags(self, scope: str) -> None:
            target = api.resource(scope)
            if target is None:
                return self._send(404, _arm_error("ResourceNotFound", f"{scope} not found."))
            if self.command == "PATCH":
                body = api.requests[-1].body or {}
                given = body["properties"]["tags"]
                if body.get("operation") == "Delete":  # the given name-value pairs go
                    target.tags = {key: value for key, value in (target.tags or {}).items()
                                   if given.get(key, object()) != value}
                else:
                    assert body.get("operation") == "Merge", body
                    target.tags = {**(target.tags or {}), **given}
            tags = rm.TagsResource(id=f"{scope}/providers/Microsoft.Resources/tags/default",
                                   name="default", type="Microsoft.Resources/tags",
                                   properties=rm.Tags(tags=dict(target.tags or {})))
            self._send(200, tags.as_dict())

    return Handler


class StaticToken:
    """A TokenCredential with a fixed token, as azure-identity's credentials hand out."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("test-token", int(time.time()) + 3600)


class ExpiredLogin:
    """A credential whose refresh is refused, as with an expired refresh token."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        raise ClientAuthenticationError("AADSTS700082: The refresh token has expired due to "
                                        "inactivity.")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, str]:
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    bundle = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return context, str(bundle)


def settings(api: FakeArm, ca_file: str, credential: Any = None) -> azure.AzureSettings:
    return azure.AzureSettings(credential=credential or StaticToken(), base_url=api.url,
                               client_kwargs={"connection_verify": ca_file, "retry_total": 1})


@pytest.fixture
def fake_arm(tls: tuple[ssl.SSLContext, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeArm]:
    context, ca_file = tls
    api = FakeArm(estate())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    api.url = f"https://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(azure, "SETTINGS", settings(api, ca_file))
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()



def scan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *extra: str,
         now: datetime = OFF_HOURS) -> tuple[dict[str, Any], str]:
    code, out, err = run_cli(["scan", "--source", "azure", "--now", now.isoformat(),
                              "--format", "json", *extra], capsys, monkeypatch)
    assert code in (0, 1), err
    return json.loads(out), err


def name_of(resource_id: str) -> str:
    return resource_id.rsplit("/", 1)[-1]


def by_policy(report: dict[str, Any], policy: str) -> dict[str, dict[str, Any]]:
    return {name_of(f["resource"]["id"]): f for f in report["findings"]
            if f["policy"] == policy and f["result"] == "fail"}


def failing(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["policy"], name_of(f["resource"]["id"])) for f in report["findings"]
            if f["result"] == "fail"}


def collect_live(**options: Any) -> Any:
    return azure.collect(None, ScanOptions(**options), builtin_catalog())


# ---------------------------------------------------------------------------- normalizing


def test_vms_disks_and_node_pools_normalize_from_the_api(fake_arm: FakeArm) -> None:
    collected = collect_live(subscriptions=(DEV,))
    found = {name_of(r.id): r for r in collected.resources}
    train = found["train-a100"]
    assert train.id == vm_id(DEV, "train-a100")
    assert (train.kind, train.category, train.region, train.account) == (
        "azurerm_linux_virtual_machine", Category.INSTANCE, "eastus", DEV)
    assert (train.capacity, train.state, train.tags) == (Capacity.ON_DEMAND, State.RUNNING,
                                                         COST_TAGS)
    assert train.gpu is not None and (train.gpu.model, train.gpu.count) == (
        "NVIDIA A100 80GB PCIe", 1)
    assert train.hourly_usd == pytest.approx(3.673)
    assert train.namespace_labels == {"env": "dev"}
    assert found["spot-t4"].capacity is Capacity.SPOT
    win = found["win-v100"]
    assert (win.kind, win.state) == ("azurerm_windows_virtual_machine", State.RUNNING)
    assert found["idle-a10"].state is State.STOPPED
    assert not found["web"].has_gpu

    os_disk = found["train-a100_OsDisk"]
    assert (os_disk.kind, os_disk.category, os_disk.encrypted, os_disk.customer_key) == (
        "azurerm_managed_disk", Category.VOLUME, True, False)
    assert os_disk.tags == COST_TAGS  # the managing VM's tags
    assert found["spot-t4_OsDisk"].customer_key is True
    assert (found["datasets"].customer_key, found["datasets"].state) == (True, State.STOPPED)
    assert found["scratch"].customer_key is False

    pool = found["gpuspot"]
    assert pool.id == arm_id(DEV, "rg-aks", "Microsoft.ContainerService/managedClusters",
                             "aks-ml") + "/agentPools/gpuspot"
    assert (pool.kind, pool.category, pool.cluster, pool.count, pool.capacity) == (
        "azurerm_kubernetes_cluster_node_pool", Category.NODE_GROUP, "aks-ml", 2, Capacity.SPOT)
    assert found["gpu"].capacity is Capacity.ON_DEMAND
    assert len(collected.resources) == 5 + 4 + 3
    assert collected.warnings == []


def test_listing_is_paged_and_bounded(fake_arm: FakeArm) -> None:
    collect_live(subscriptions=(DEV,))
    vm_lists = [r for r in fake_arm.requests if r.path.endswith("Compute/virtualMachines")]
    # five VMs, two per page, listed twice (models, then statusOnly): no call per VM
    assert len(vm_lists) == 6
    assert sum(r.query.get("statusOnly") == ["true"] for r in vm_lists) == 3
    assert not any(r.path.endswith("/instanceView") for r in fake_arm.requests)


def test_all_enabled_subscriptions_are_scanned_when_none_is_named(fake_arm: FakeArm) -> None:
    fake_arm.forbidden.clear()
    fake_arm.subscriptions[LOCKED].subscription.state = "Disabled"
    collected = collect_live()
    assert {r.account for r in collected.resources} == {DEV, PROD}
    section = collected.snapshot["azure"]["subscriptions"]
    assert [s["subscription"]["subscriptionId"] for s in section] == [DEV, PROD]
    assert section[0]["virtual_machines"][0]["properties"]["hardwareProfile"]["vmSize"]


# ---------------------------------------------------------------------------- scan findings


def test_scan_reports_spot_tags_and_off_hours(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_arm.forbidden.clear()
    report, _ = scan(capsys, monkeypatch)
    assert failing(report) == {
        ("gpu-spot-required", "train-a100"),
        ("gpu-spot-required", "win-v100"),
        ("gpu-spot-required", "idle-a10"),
        ("gpu-spot-required", "gpu"),
        ("gpu-off-hours-shutdown", "train-a100"),
        ("gpu-off-hours-shutdown", "spot-t4"),
        ("gpu-off-hours-shutdown", "win-v100"),  # stopped, not deallocated: still billed
        ("gpu-off-hours-shutdown", "gpuspot"),
        ("gpu-off-hours-shutdown", "gpu"),
        ("required-cost-tags", "spot-t4"),  # AKS pools carry their cluster's tags
    }
    assert "azurerm_linux_virtual_machine" in \
        by_policy(report, "gpu-spot-required")["train-a100"]["remediation"]["detail"]
    assert fake_arm.mutations() == []  # dry-run: nothing but reads


def test_business_hours_have_no_off_hours_findings(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, _ = scan(capsys, monkeypatch, now=BUSINESS_HOURS)
    assert by_policy(report, "gpu-off-hours-shutdown") == {}


def test_require_customer_key_flags_disks_without_a_disk_encryption_set(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain, _ = scan(capsys, monkeypatch)
    assert by_policy(plain, "encryption-at-rest") == {}
    overrides = tmp_path / "cmk.yaml"
    overrides.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n  encryption-at-rest:\n"
                         "    parameters: {require_customer_key: true}\n")
    report, _ = scan(capsys, monkeypatch, "--policies", "builtin", "--policies", str(overrides))
    assert set(by_policy(report, "encryption-at-rest")) == {"train-a100_OsDisk", "scratch"}


def _sku(name: str, location: str, **capabilities: str) -> dict[str, Any]:
    return {"resourceType": "virtualMachines", "name": name, "tier": "Standard",
            "size": name.removeprefix("Standard_"), "locations": [location],
            "capabilities": [{"name": k, "value": v} for k, v in capabilities.items()]}


def test_a_vm_size_the_catalog_lacks_is_asked_once_at_the_runtime_door(
    fake_arm: FakeArm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(vm_sizes, "_remembered", {})
    fake_arm.subscriptions[DEV].vms += [
        virtual_machine(DEV, name, size, tags=COST_TAGS)
        for name, size in (("future-1", "Standard_NC96ads_Z9_v9"),
                           ("future-2", "standard_nc96ads_z9_v9"),  # as configs write it
                           ("typo", "Standard_NC96ads_Z9_v0"))]
    fake_arm.skus = [
        _sku("Standard_NC96ads_Z9_v9", "eastus", GPUs="4", vCPUs="96", MemoryGB="880"),
        _sku("Standard_NC96ads_Z9_v9", "westeurope", GPUs="4", vCPUs="96", MemoryGB="880"),
        _sku("Standard_D2s_v9", "eastus", vCPUs="2", MemoryGB="8"),
    ]
    saved = tmp_path / "azure.snapshot.json"
    live, _ = scan(capsys, monkeypatch, "--subscription", DEV, "--save-snapshot", str(saved))
    asked = [r for r in fake_arm.requests if r.path.endswith("/providers/Microsoft.Compute/skus")]
    assert [r.query["$filter"] for r in asked] == [["location eq 'eastus'"]]  # once
    spot = {name_of(f["resource"]["id"]): f for f in live["findings"]
            if f["policy"] == "gpu-spot-required"}
    for name in ("future-1", "future-2"):
        assert spot[name]["result"] == "fail"
        assert "runs 4 GPU" in spot[name]["message"]
    assert spot["typo"]["result"] == "unknown"  # the SKU listing does not hold it either
    requests = len(fake_arm.requests)
    code, out, err = run_cli(["scan", "--source", f"snapshot:{saved}", "--now",
                              OFF_HOURS.isoformat(), "--format", "json"], capsys, monkeypatch)
    assert code == 1, err
    assert failing(json.loads(out)) == failing(live)
    assert len(fake_arm.requests) == requests  # the replay knows the learned size offline
    assert [t["name"] for t in read_snapshot(saved)["azure"]["vm_sizes"]] == [
        "Standard_NC96ads_Z9_v9"]


def test_snapshot_round_trip_gives_the_same_findings(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = tmp_path / "azure.snapshot.json"
    live, _ = scan(capsys, monkeypatch, "--save-snapshot", str(saved))
    requests = len(fake_arm.requests)
    code, out, err = run_cli(["scan", "--source", f"snapshot:{saved}", "--now",
                              OFF_HOURS.isoformat(), "--format", "json"], capsys, monkeypatch)
    assert code == 1, err
    assert failing(json.loads(out)) == failing(live)
    assert len(fake_arm.requests) == requests  # replayed offline
    bundle = read_snapshot(saved)
    vms = bundle["azure"]["subscriptions"][0]["virtual_machines"]
    assert vms[0]["properties"]["instanceView"]["statuses"][-1]["code"].startswith("PowerState/")


def test_recorded_fixture_matches_the_api_models_and_replays() -> None:
    bundle = json.loads((FIXTURES / "snapshot.json").read_text())
    for entry in bundle["azure"]["subscriptions"]:
        # the fields the adapter reads are found by the SDK models' typed attributes, so they
        # carry the API's own names (a misspelled key would read as None here)
        assert sm.Subscription(entry["subscription"]).subscription_id
        for item in entry["virtual_machines"]:
            vm = cm.VirtualMachine(item)
            assert vm.id and vm.location and vm.properties.hardware_profile.vm_size
            assert vm.properties.priority in ("Regular", "Spot")
            assert vm.properties.storage_profile.os_disk.os_type in ("Linux", "Windows")
            assert vm.properties.instance_view.statuses[-1].code.startswith("PowerState/")
        for item in entry["disks"]:
            disk = cm.Disk(item)
            assert disk.properties.encryption.type.startswith("EncryptionAtRest")
            assert disk.properties.disk_state in ("Attached", "Unattached")
        for item in entry["managed_clusters"]:
            pools = km.ManagedCluster(item).properties.agent_pool_profiles
            assert all(p.vm_size and p.count and p.scale_set_priority for p in pools)
    resources = load_snapshot_resources(FIXTURES / "snapshot.json", builtin_catalog())
    spot = {r.name: r.capacity for r in resources if r.category is Category.INSTANCE}
    assert spot == {"train-a100": Capacity.ON_DEMAND, "spot-t4": Capacity.SPOT,
                    "win-v100": Capacity.ON_DEMAND, "idle-a10": Capacity.ON_DEMAND,
                    "web": Capacity.ON_DEMAND, "serving": Capacity.ON_DEMAND}


def test_a_malformed_snapshot_section_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "Snapshot", "azure": {"subscriptions": [
        {"subscription": {"subscriptionId": DEV}, "disks": {"not": "a list"}}]}}))
    with pytest.raises(InputError, match=r"azure.subscriptions\[0\].disks must be a list"):
        load_snapshot_resources(bad, builtin_catalog())


# ---------------------------------------------------------------------------- errors


def test_a_forbidden_subscription_is_a_warning_and_the_rest_is_scanned(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    report, err = scan(capsys, monkeypatch)
    assert ("gpu-off-hours-shutdown", "train-a100") in failing(report)
    assert (f"gpuwarden: warning: azure: subscription {LOCKED}: permission denied (HTTP 403): "
            "AuthorizationFailed: The client 'gpuwarden' with object id") in err
    assert err.count("warning:") == 1


def test_every_subscription_refused_is_an_input_error(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run_cli(["scan", "--source", f"azure:{LOCKED}"], capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"gpuwarden: error: azure: subscription {LOCKED}: permission denied")


def test_an_invalid_token_is_an_input_error(
    fake_arm: FakeArm, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_arm.reject_all = True
    code, _, err = run_cli(["scan", "--source", "azure"], capsys, monkeypatch)
    assert code == 2
    assert err == ("gpuwarden: error: azure: cannot list subscriptions: credentials rejected or "
                   "unavailable: InvalidAuthenticationToken: The access token is invalid.\n")


def test_an_expired_login_is_an_input_error(
    fake_arm: FakeArm, tls: tuple[ssl.SSLContext, str], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(azure, "SETTINGS", settings(fake_arm, tls[1], ExpiredLogin()))
    code, _, err = run_cli(["scan", "--source", "azure", "--subscription", DEV], capsys,
                           monkeypatch)
    assert code == 2
    assert err == ("gpuwarden: error: azure: credentials rejected or unavailable: AADSTS700082: "
                   "The refresh token has expired due to inactivity.\n")
    assert fake_arm.requests == []  # refused before anything was sent


def test_throttling_is_retried_then_reported(fake_arm: FakeArm) -> None:
    fake_arm.throttled = {DEV: 1, PROD: 10}
    collected = collect_live(subscriptions=(DEV, PROD))
    assert {r.account for r in collected.resources} == {DEV}  # one 429, then answered
    prod = [r for r in fake_arm.requests if r.path.startswith(f"/subscriptions/{PROD}/")]
    assert len(prod) == 2  # retry_total=1: the first try and one retry
    assert collected.warnings == [
        f"azure: subscription {PROD}: throttled (HTTP 429) after retries: TooManyRequests: The "
        "request is being throttled as the limit has been reached for operation type - "
        "Read_30Min.; skipped"]


# ---------------------------------------------------------------------------- enforce


def enforce(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, audit: Path,
            *extra: str) -> dict[str, Any]:
    report, _ = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), *extra)
    assert report["mode"] == "enforce"
    return report


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_enforce_deallocates_off_hours_vms_and_audits(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    report = enforce(capsys, monkeypatch, audit)
    posts = sorted(name_of(r.path.removesuffix("/deallocate")) for r in fake_arm.mutations()
                   if r.method == "POST")
    assert posts == ["spot-t4", "train-a100", "win-v100"]
    assert all(r.path.endswith("/deallocate") for r in fake_arm.mutations()
               if r.method == "POST")
    marked = [r for r in fake_arm.mutations() if r.method == "PATCH"]  # the stop marks, first
    assert len(marked) == 3 and all(r.body["operation"] == "Merge" for r in marked)
    results = {name: f["remediation"]["status"]
               for name, f in by_policy(report, "gpu-off-hours-shutdown").items()}
    assert results == {"train-a100": "applied", "spot-t4": "applied", "win-v100": "applied",
                       "gpuspot": "applied", "gpu": "applied"}  # AKS pools scaled to zero
    pool = by_policy(report, "gpu-off-hours-shutdown")["gpu"]["remediation"]
    assert pool["detail"].endswith("/agentPools/gpu to zero (was 0,0,1 min,max,count; kept in "
                                   "tag gpuwarden:previous-size)")
    win = by_policy(report, "gpu-off-hours-shutdown")["win-v100"]["remediation"]
    assert win["detail"] == f"deallocated {vm_id(DEV, 'win-v100')} (was stopped)"
    lines = [e for e in audit_lines(audit) if e["resource"] == vm_id(DEV, "train-a100")]
    assert [(e["phase"], e["result"]) for e in lines] == [("before", None), ("after", "applied")]
    assert lines[1]["before"] == {"power_state": "running"}
    assert lines[1]["after"] == {"power_state": "deallocating"}
    assert lines[1]["request"]["virtualMachines.deallocate"] == {
        "subscription": DEV, "resourceGroup": "rg-ml", "vmName": "train-a100"}
    assert lines[1]["request"]["tags.updateAtScope"]["properties"]["tags"][
        "gpuwarden:stopped-by"] == f"gpu-off-hours-shutdown@{OFF_HOURS.isoformat()}"
    assert (lines[1]["provider"], lines[1]["account"], lines[1]["region"]) == (
        "azure", DEV, "eastus")
    pool_line = [e for e in audit_lines(audit) if e["resource"].endswith("/agentPools/gpu")]
    assert [(e["phase"], e["result"]) for e in pool_line] == [("before", None),
                                                              ("after", "applied")]
    assert [r.method for r in fake_arm.mutations() if "/agentPools/" in r.path] == ["PUT", "PUT"]
    serving = fake_arm.vm(vm_id(PROD, "serving"))
    assert serving is not None and serving.properties.instance_view.statuses[-1].code == \
        "PowerState/running"


def test_enforce_respects_the_blast_radius(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = enforce(capsys, monkeypatch, tmp_path / "a.jsonl", "--max-actions", "2")
    assert len([r for r in fake_arm.mutations() if r.method in ("POST", "PUT")]) == 2
    stops = {name: f["remediation"] for name, f in
             by_policy(report, "gpu-off-hours-shutdown").items()}
    assert sorted(r["status"] for r in stops.values()) == ["applied", "applied", "skipped",
                                                           "skipped", "skipped"]
    assert {r["detail"] for r in stops.values() if r["status"] == "skipped"} == {
        "blast radius: --max-actions 2 reached"}


def test_enforce_is_idempotent(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enforce(capsys, monkeypatch, tmp_path / "a.jsonl")
    first = len(fake_arm.mutations())
    report = enforce(capsys, monkeypatch, tmp_path / "a.jsonl")
    assert len(fake_arm.mutations()) == first == 8  # 3 × mark and deallocate, 2 pools
    assert set(by_policy(report, "gpu-off-hours-shutdown")) == set()


def test_a_stale_listing_skips_a_vm_already_deallocated(fake_arm: FakeArm, tmp_path: Path) -> None:
    from engine.pipeline import build_engine, evaluate_and_plan

    collected = collect_live(subscriptions=(DEV,))
    report = evaluate_and_plan(build_engine(None), collected.resources, OFF_HOURS)
    set_power(fake_arm.vm(vm_id(DEV, "train-a100")), "deallocated")  # type: ignore[arg-type]
    fake_arm.subscriptions[DEV].vms = [vm for vm in fake_arm.subscriptions[DEV].vms
                                       if vm.name != "win-v100"]  # deleted since the listing
    fake_arm.locked.add("spot-t4")
    audit = tmp_path / "a.jsonl"
    done = apply_azure_remediations(report, collected.resources, collected.clients["azure"],
                                    max_actions=5, audit_log=audit)
    results = {name: (f["remediation"]["status"], f["remediation"]["detail"])
               for name, f in by_policy(done.to_json_dict(), "gpu-off-hours-shutdown").items()
               if name in ("train-a100", "win-v100", "spot-t4")}
    assert results == {
        "train-a100": ("skipped", f"{vm_id(DEV, 'train-a100')} is already deallocated"),
        "win-v100": ("skipped", f"{vm_id(DEV, 'win-v100')} no longer exists"),
        "spot-t4": ("failed", f"stop {vm_id(DEV, 'spot-t4')} failed: permission denied (HTTP "
                              "403): AuthorizationFailed: The client 'gpuwarden' does not have "
                              "authorization to perform action 'Microsoft.Compute/"
                              "virtualMachines/deallocate/action' over scope "
                              f"'{vm_id(DEV, 'spot-t4')}'."),
    }
    assert [r.path for r in fake_arm.mutations() if r.method == "POST"] == [
        vm_id(DEV, "spot-t4") + "/deallocate"]
    failed = [e for e in audit_lines(audit) if e["result"] == "failed"]
    assert [(e["phase"], e["resource"]) for e in failed] == [("after", vm_id(DEV, "spot-t4"))]


MARK_POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: gpu-cost-tags-marked
    title: GPU VMs without cost tags are marked
    severity: medium
    resources: [instance]
    parameters: {required_tags: [team, project, cost-center]}
    scope: {has-gpu: true}
    violation: {tags-missing: {}}
    message: "{{ r.name }} is missing {{ details.missing_tags | join(', ') }}"
    enforcement: {runtime: deny}
    remediations: [mark-violation]
"""


def test_mark_violation_merges_a_tag_once(
    fake_arm: FakeArm, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = tmp_path / "mark.yaml"
    policy.write_text(MARK_POLICY)
    audit = tmp_path / "a.jsonl"
    days = {f"gpu-cost-tags-marked@{datetime.now(UTC):%Y-%m-%d}"}
    report = enforce(capsys, monkeypatch, audit, "--policies", str(policy))
    days.add(f"gpu-cost-tags-marked@{datetime.now(UTC):%Y-%m-%d}")
    [call] = fake_arm.mutations()
    assert (call.method, call.path) == (
        "PATCH", vm_id(DEV, "spot-t4") + "/providers/Microsoft.Resources/tags/default")
    assert call.body["operation"] == "Merge"
    assert list(call.body["properties"]["tags"]) == [VIOLATION_TAG]
    assert call.body["properties"]["tags"][VIOLATION_TAG] in days
    vm = fake_arm.vm(vm_id(DEV, "spot-t4"))
    assert vm is not None and vm.tags["team"] == "vision"  # merged, not replaced
    assert by_policy(report, "gpu-cost-tags-marked")["spot-t4"]["remediation"]["status"] == \
        "applied"
    again = enforce(capsys, monkeypatch, audit, "--policies", str(policy))
    assert len(fake_arm.mutations()) == 1
    skipped = by_policy(again, "gpu-cost-tags-marked")["spot-t4"]["remediation"]
    assert skipped["status"] == "skipped"
    assert skipped["detail"] == f"{vm_id(DEV, 'spot-t4')} is already marked for " \
        "gpu-cost-tags-marked"
