"""Google Cloud: the official clients against a loopback server that answers like the APIs.

The estate is built from the SDK's own models (`compute_v1.Instance`, `Disk`, `Project`, ...) and
served as their JSON (`Message.to_json`), so field names, nesting and paging are the APIs' own:
aggregated lists keyed by scope with `nextPageToken`, per-zone warnings, Operations for stop and
setLabels (with the label fingerprint precondition), Google error bodies with 401/403/429 and
Retry-After. Every request is recorded, so the tests can assert what was (and was not) sent.
"""

from __future__ import annotations

import json
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("google.cloud.compute_v1")
pytest.importorskip("google.cloud.resourcemanager_v3")

from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.exceptions import RefreshError
from google.cloud import compute_v1, resourcemanager_v3

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, Category, State
from engine.sources import gcp
from engine.sources.gcp import machine_types
from engine.sources.registry import ScanOptions
from engine.sources.snapshot import load_snapshot_resources, read_snapshot
from remediations.gcp_actions import VIOLATION_LABEL, apply_gcp_remediations
from remediations.planning import RESUME_SCHEDULE_LABEL, STOPPED_BY_LABEL
from tests.conftest import BUSINESS_HOURS, OFF_HOURS, run_cli
from tests.gke_fake import GkeRoutes, GkeState

FIXTURES = Path(__file__).parent / "fixtures" / "gcp"
API = "https://www.googleapis.com/compute/v1"
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
COST_LABELS = {"team": "ml", "project": "llm", "cost-center": "cc-4711"}
OFF_HOURS_ISO = OFF_HOURS.isoformat()


# ---------------------------------------------------------------------------- estate (SDK models)


def zone_url(project: str, zone: str) -> str:
    return f"{API}/projects/{project}/zones/{zone}"


def instance(project: str, zone: str, name: str, machine: str, *, status: str = "RUNNING",
             labels: dict[str, str] | None = None, accelerators: tuple[tuple[str, int], ...] = (),
             spot: bool = False, preemptible: bool = False,
             network_tags: tuple[str, ...] = ()) -> compute_v1.Instance:
    scheduling = compute_v1.Scheduling(
        provisioning_model="SPOT" if spot else "STANDARD", preemptible=preemptible,
        automatic_restart=not (spot or preemptible),
        on_host_maintenance="TERMINATE")
    return compute_v1.Instance(
        id=zlib.crc32(f"{project}/instances/{name}".encode()) * 7919,
        name=name,
        zone=zone_url(project, zone),
        self_link=f"{zone_url(project, zone)}/instances/{name}",
        machine_type=f"{zone_url(project, zone)}/machineTypes/{machine}",
        status=status,
        labels=labels or {},
        label_fingerprint="42WmSpB8rSM=",
        tags=compute_v1.Tags(items=list(network_tags), fingerprint="6smc4R4d39I="),
        scheduling=scheduling,
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"{zone_url(project, zone)}/acceleratorTypes/{kind}",
                accelerator_count=count)
            for kind, count in accelerators
        ],
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True, device_name=name, mode="READ_WRITE", type_="PERSISTENT",
            source=f"{zone_url(project, zone)}/disks/{name}")],
    )


def disk(project: str, name: str, *, zone: str | None = None, region: str | None = None,
         users: tuple[str, ...] = (), kms: str | None = None,
         labels: dict[str, str] | None = None) -> compute_v1.Disk:
    scope = zone_url(project, zone) if zone else f"{API}/projects/{project}/regions/{region}"
    found = compute_v1.Disk(
        id=zlib.crc32(f"{project}/disks/{name}".encode()) * 7919, name=name, size_gb=500,
        status="READY", self_link=f"{scope}/disks/{name}", type_=f"{scope}/diskTypes/pd-balanced",
        users=[f"{zone_url(project, zone or 'us-central1-a')}/instances/{u}" for u in users],
        labels=labels or {},
    )
    if zone:
        found.zone = scope
    else:
        found.region = scope
        found.replica_zones = [zone_url(project, f"{region}-a"), zone_url(project, f"{region}-b")]
    if kms:
        found.disk_encryption_key = compute_v1.CustomerEncryptionKey(kms_key_name=kms)
    return found


def project(project_id: str, number: int, labels: dict[str, str]) -> resourcemanager_v3.Project:
    return resourcemanager_v3.Project(
        name=f"projects/{number}", project_id=project_id, display_name=project_id,
        state=resourcemanager_v3.Project.State.ACTIVE, labels=labels,
        parent="organizations/1234567890")


@dataclass
class ProjectState:
    project: resourcemanager_v3.Project
    instances: dict[str, list[compute_v1.Instance]] = field(default_factory=dict)
    disks: dict[str, list[compute_v1.Disk]] = field(default_factory=dict)
    unreachable: tuple[str, ...] = ()


def estate() -> dict[str, ProjectState]:
    """ml-dev: five instances and three disks; ml-prod: production by its project labels."""
    dev, prod = "ml-dev", "ml-prod"
    trainer = instance(dev, "us-central1-a", "trainer-t4", "n1-standard-16",
                       labels=COST_LABELS, accelerators=(("nvidia-tesla-t4", 2),),
                       network_tags=("team", "project", "cost-center"))
    a100 = instance(dev, "us-central1-a", "a100-spot", "a2-highgpu-1g", spot=True,
                    labels={**COST_LABELS, "gpuwarden-exempt": "gpu-off-hours-shutdown"})
    l4 = instance(dev, "europe-west4-b", "l4-preemptible", "g2-standard-4", preemptible=True,
                  labels={"team": "vision"}, network_tags=("project", "cost-center"))
    v100 = instance(dev, "us-central1-a", "v100-stopped", "n1-standard-8", status="TERMINATED",
                    labels=COST_LABELS, accelerators=(("nvidia-tesla-v100", 1),))
    web = instance(dev, "us-central1-a", "web", "e2-medium")
    serving = instance(prod, "us-east1-b", "serving", "a2-highgpu-1g", labels=COST_LABELS)
    return {
        dev: ProjectState(
            project(dev, 111111111111, {"env": "dev"}),
            instances={"zones/us-central1-a": [trainer, a100, v100, web],
                       "zones/europe-west4-b": [l4], "zones/asia-east1-a": []},
            disks={"zones/us-central1-a": [
                disk(dev, "trainer-t4", zone="us-central1-a", users=("trainer-t4",)),
                disk(dev, "ckpt-cmek", zone="us-central1-a", labels={"team": "ml"},
                     kms=f"projects/{dev}/locations/us-central1/keyRings/gpu/cryptoKeys/disks"),
            ], "regions/us-central1": [disk(dev, "shared-data", region="us-central1")]},
            unreachable=("zones/asia-east1-a",),
        ),
        prod: ProjectState(
            project(prod, 222222222222, {"env": "prod"}),
            instances={"zones/us-east1-b": [serving]},
            disks={"zones/us-east1-b": [disk(prod, "serving", zone="us-east1-b",
                                             users=("serving",))]},
        ),
    }


# ---------------------------------------------------------------------------- loopback server


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any


@dataclass
class FakeGcp:
    projects: dict[str, ProjectState]
    requests: list[Recorded] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)  # projects whose compute calls answer 403
    locked: set[str] = field(default_factory=set)  # instances whose stop/setLabels answer 403
    throttled: dict[str, int] = field(default_factory=dict)  # project → 429 answers still due
    reject_all: bool = False  # every call answers 401
    machine_types: dict[str, compute_v1.MachineType] = field(default_factory=dict)
    gke: GkeState = field(default_factory=GkeState)  # GKE clusters (tests/gke_fake.py)
    page_size: int = 2  # scopes per aggregated-list page
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mutations(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in MUTATING]

    def find(self, project_id: str, zone: str, name: str) -> compute_v1.Instance | None:
        state = self.projects.get(project_id)
        for item in (state.instances.get(f"zones/{zone}", []) if state else []):
            if item.name == name:
                return item
        return None


def _error(code: int, status: str, message: str, reason: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status,
                      "errors": [{"message": message, "domain": "global", "reason": reason}]}}


def make_handler(api: FakeGcp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: str | dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
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
                self._route(url.path.strip("/").split("/"), query)

        do_GET = do_POST = do_PUT = _handle

        def _route(self, parts: list[str], query: dict[str, list[str]]) -> None:
            if api.reject_all:
                return self._send(401, _error(
                    401, "UNAUTHENTICATED", "Request had invalid authentication credentials. "
                    "Expected OAuth 2 access token.", "authError"))
            if parts[:2] == ["v3", "projects:search"]:
                body = resourcemanager_v3.SearchProjectsResponse(
                    projects=[s.project for s in api.projects.values()])
                return self._send(200, resourcemanager_v3.SearchProjectsResponse.to_json(body))
            if parts[:2] == ["v3", "projects"] and len(parts) == 3:
                found = api.projects.get(parts[2])
                if found is None:
                    return self._send(403, _error(403, "PERMISSION_DENIED", "Permission "
                                                  "'resourcemanager.projects.get' denied",
                                                  "forbidden"))
                return self._send(200, resourcemanager_v3.Project.to_json(found.project))
            if parts[:1] == ["v1"]:
                return GkeRoutes(self, api.gke, api.requests[-1].body).route(parts)
            if parts[:3] != ["compute", "v1", "projects"] or len(parts) < 5:
                return self._send(404, _error(404, "NOT_FOUND", "no such path", "notFound"))
            project_id = parts[3]
            state = api.projects.get(project_id)
            if project_id in api.forbidden:
                return self._send(403, _error(
                    403, "PERMISSION_DENIED", f"Required 'compute.instances.list' permission for "
                    f"'projects/{project_id}'", "forbidden"))
            if api.throttled.get(project_id):
                api.throttled[project_id] -= 1
                return self._send(429, _error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for "
                                              "quota metric 'Read requests'", "rateLimitExceeded"),
                                  {"Retry-After": "0"})
            if state is None:
                return self._send(404, _error(404, "NOT_FOUND", f"The resource 'projects/"
                                              f"{project_id}' was not found", "notFound"))
            if parts[4] == "aggregated":
                return self._aggregated(state, parts[5], query)
            if parts[4] == "zones" and len(parts) == 8 and parts[6] == "instanceGroupManagers":
                return GkeRoutes(self, api.gke, None).group_manager(project_id, parts[5],
                                                                    parts[7])
            if parts[4] == "zones" and len(parts) == 8 and parts[6] == "machineTypes":
                return self._machine_type(parts[7])
            if parts[4] == "zones" and len(parts) >= 8 and parts[6] == "instances":
                return self._instance(project_id, parts[5], parts[7], parts[8:])
            return self._send(404, _error(404, "NOT_FOUND", "no such path", "notFound"))

        def _machine_type(self, name: str) -> None:
            found = api.machine_types.get(name)
            if found is None:
                return self._send(404, _error(404, "NOT_FOUND", f"The resource 'machineTypes/"
                                              f"{name}' was not found", "notFound"))
            return self._send(200, compute_v1.MachineType.to_json(found))

        def _aggregated(self, state: ProjectState, collection: str,
                        query: dict[str, list[str]]) -> None:
            scopes = state.instances if collection == "instances" else state.disks
            keys = sorted(scopes)
            start = int((query.get("pageToken") or ["0"])[0])
            page = keys[start:start + api.page_size]
            items: dict[str, Any] = {}
            for key in page:
                entries = scopes[key]
                if key in state.unreachable:
                    scoped: dict[str, Any] = {"warning": {
                        "code": "UNREACHABLE", "message": f"{key} is unreachable",
                        "data": [{"key": "scope", "value": key}]}}
                elif entries:
                    model = type(entries[0])
                    scoped = {collection: [json.loads(model.to_json(e)) for e in entries]}
                else:
                    scoped = {"warning": {"code": "NO_RESULTS_ON_PAGE", "message":
                                          f"There are no results for scope '{key}' on this page.",
                                          "data": [{"key": "scope", "value": key}]}}
                items[key] = scoped
            body: dict[str, Any] = {
                "kind": f"compute#{collection[:-1]}AggregatedList",
                "id": f"projects/{state.project.project_id}/aggregated/{collection}",
                "items": items,
                "selfLink": f"{API}/projects/{state.project.project_id}/aggregated/{collection}"}
            if start + api.page_size < len(keys):
                body["nextPageToken"] = str(start + api.page_size)
            # Parse through the SDK's list model: the answer must be what the real API could send.
            list_model = (compute_v1.InstanceAggregatedList if collection == "instances"
                          else compute_v1.DiskAggregatedList)
            self._send(200, list_model.to_json(list_model.from_json(json.dumps(body))))

        def _instance(self, project_id: str, zone: str, name: str, verb: list[str]) -> None:
            found = api.find(project_id, zone, name)
            if found is None:
                return self._send(404, _error(404, "NOT_FOUND", f"The resource 'projects/"
                                              f"{project_id}/zones/{zone}/instances/{name}' was "
                                              "not found", "notFound"))
            if self.command == "GET" and not verb:
                return self._send(200, compute_v1.Instance.to_json(found))
            if self.command == "POST" and name in api.locked:
                return self._send(403, _error(
                    403, "PERMISSION_DENIED", f"Required 'compute.instances.{verb[0]}' "
                    f"permission for '{found.self_link.split('/v1/', 1)[1]}'", "forbidden"))
            if self.command == "POST" and verb == ["stop"]:
                found.status = "STOPPING"
                return self._send(200, self._operation("stop", found))
            if self.command == "POST" and verb == ["start"]:
                found.status = "STAGING"
                return self._send(200, self._operation("start", found))
            if self.command == "POST" and verb == ["setLabels"]:
                body = api.requests[-1].body or {}
                if body.get("labelFingerprint") != found.label_fingerprint:
                    return self._send(412, _error(412, "FAILED_PRECONDITION", "Labels "
                                                  "fingerprint either invalid or resource labels "
                                                  "have changed", "conditionNotMet"))
                found.labels = body.get("labels") or {}
                found.label_fingerprint = f"fp-{len(api.requests)}"
                return self._send(200, self._operation("setLabels", found))
            return self._send(400, _error(400, "INVALID_ARGUMENT", "bad request", "invalid"))

        def _operation(self, kind: str, target: compute_v1.Instance) -> str:
            operation = compute_v1.Operation(
                kind="compute#operation", id=len(api.requests),
                name=f"operation-{len(api.requests)}-{kind}", operation_type=kind,
                status=compute_v1.Operation.Status.RUNNING, progress=0, zone=target.zone,
                target_link=target.self_link, user="gpuwarden@example.iam.gserviceaccount.com",
                insert_time="2026-12-01T03:00:00.000-08:00",
                self_link=f"{target.zone}/operations/operation-{len(api.requests)}-{kind}")
            return compute_v1.Operation.to_json(operation)

    return Handler


@pytest.fixture
def fake_gcp(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcp]:
    yield from served(FakeGcp(estate()), make_handler, monkeypatch)


def served(api: FakeGcp, handler: Callable[[FakeGcp], type[BaseHTTPRequestHandler]],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcp]:
    """`api` on a loopback server, with the GCP adapter pointed at it, until the test ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(api))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setattr(gcp, "SETTINGS", gcp.GcpSettings(
        credentials=AnonymousCredentials(), compute_endpoint=api.url,
        resource_manager_endpoint=api.url, container_endpoint=api.url, max_attempts=2,
        max_retry_wait_s=0.0))
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()



def failing(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["policy"], f["resource"]["id"].rsplit("/", 1)[-1])
            for f in report["findings"] if f["result"] == "fail"}


def by_policy(report: dict[str, Any], policy: str) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"].rsplit("/", 1)[-1]: f
            for f in report["findings"] if f["policy"] == policy and f["result"] == "fail"}


def scan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
         *extra: str, now: datetime = OFF_HOURS) -> tuple[int, dict[str, Any], str]:
    code, out, err = run_cli(["scan", "--source", "gcp", "--now", now.isoformat(),
                              "--format", "json", *extra], capsys, monkeypatch)
    assert code in (0, 1), err
    return code, json.loads(out), err


# ---------------------------------------------------------------------------- normalizing


def collect_live(api: FakeGcp, **options: Any) -> Any:
    return gcp.collect(None, ScanOptions(**options), builtin_catalog())


def test_instances_and_disks_normalize_from_the_api(fake_gcp: FakeGcp) -> None:
    collected = collect_live(fake_gcp, projects=("ml-dev",))
    found = {r.id: r for r in collected.resources}
    trainer = found["projects/ml-dev/zones/us-central1-a/instances/trainer-t4"]
    assert (trainer.kind, trainer.category, trainer.region, trainer.account) == (
        "google_compute_instance", Category.INSTANCE, "us-central1", "ml-dev")
    assert trainer.instance_type == "n1-standard-16"
    assert trainer.gpu is not None and (trainer.gpu.model, trainer.gpu.count) == ("NVIDIA T4", 2)
    assert trainer.hourly_usd == pytest.approx(2 * 0.35)  # the accelerators' price only
    assert (trainer.capacity, trainer.state) == (Capacity.ON_DEMAND, State.RUNNING)
    assert trainer.tags == COST_LABELS  # labels, not the network tags
    assert trainer.namespace_labels == {"env": "dev"}  # the project's labels

    a100 = found["projects/ml-dev/zones/us-central1-a/instances/a100-spot"]
    assert a100.capacity is Capacity.SPOT
    assert a100.gpu is not None and (a100.gpu.model, a100.gpu.count) == ("NVIDIA A100 40GB", 1)
    assert a100.hourly_usd == pytest.approx(3.673385)  # a2 machine type: GPU built in

    l4 = found["projects/ml-dev/zones/europe-west4-b/instances/l4-preemptible"]
    assert (l4.capacity, l4.region, l4.tags) == (Capacity.SPOT, "europe-west4", {"team": "vision"})
    assert l4.gpu is not None and l4.gpu.model == "NVIDIA L4"

    assert found["projects/ml-dev/zones/us-central1-a/instances/v100-stopped"].state \
        is State.STOPPED
    assert not found["projects/ml-dev/zones/us-central1-a/instances/web"].has_gpu

    boot = found["projects/ml-dev/zones/us-central1-a/disks/trainer-t4"]
    assert (boot.kind, boot.category, boot.encrypted, boot.customer_key) == (
        "google_compute_disk", Category.VOLUME, True, False)
    assert boot.tags == COST_LABELS  # inherited from the instance that uses it
    cmek = found["projects/ml-dev/zones/us-central1-a/disks/ckpt-cmek"]
    assert (cmek.customer_key, cmek.state, cmek.tags) == (True, State.STOPPED, {"team": "ml"})
    shared = found["projects/ml-dev/regions/us-central1/disks/shared-data"]
    assert (shared.kind, shared.region, shared.customer_key) == (
        "google_compute_region_disk", "us-central1", False)
    assert len(collected.resources) == 8


def _with_new_machine_types(api: FakeGcp, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two instances of a machine type newer than the catalog, which Compute Engine serves, and
    one of a type it does not know either."""
    monkeypatch.setattr(machine_types, "_remembered", {})
    zone = "us-central1-a"
    api.projects["ml-dev"].instances[f"zones/{zone}"] += [
        instance("ml-dev", zone, name, machine, labels=COST_LABELS)
        for name, machine in (("future-1", "a9-highgpu-8g"), ("future-2", "a9-highgpu-8g"),
                              ("typo", "a9-higpu-8g"))]
    api.machine_types["a9-highgpu-8g"] = compute_v1.MachineType(
        name="a9-highgpu-8g", guest_cpus=208, memory_mb=1_900_000, zone=zone,
        accelerators=[compute_v1.Accelerators(guest_accelerator_type="nvidia-h100-80gb",
                                              guest_accelerator_count=8)])


def test_a_machine_type_the_catalog_lacks_is_asked_once_at_the_runtime_door(
    fake_gcp: FakeGcp, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    _with_new_machine_types(fake_gcp, monkeypatch)
    saved = tmp_path / "gcp.snapshot.json"
    _, live, _ = scan(capsys, monkeypatch, "--project", "ml-dev", "--save-snapshot", str(saved))
    asked = [r.path.rsplit("/", 1)[-1] for r in fake_gcp.requests if "/machineTypes/" in r.path]
    assert sorted(asked) == ["a9-highgpu-8g", "a9-higpu-8g"]  # once per type, not per instance
    spot = {f["resource"]["id"].rsplit("/", 1)[-1]: f for f in live["findings"]
            if f["policy"] == "gpu-spot-required"}
    for name in ("future-1", "future-2"):
        assert spot[name]["result"] == "fail"
        assert "runs 8 NVIDIA H100" in spot[name]["message"]
    assert spot["typo"]["result"] == "unknown"  # Compute Engine does not know it either
    requests = len(fake_gcp.requests)
    code, out, err = run_cli(["scan", "--source", f"snapshot:{saved}", "--now", OFF_HOURS_ISO,
                              "--format", "json"], capsys, monkeypatch)
    assert code == 1, err
    assert failing(json.loads(out)) == failing(live)
    assert len(fake_gcp.requests) == requests  # the replay knows the learned type offline
    assert [t["name"] for t in read_snapshot(saved)["gcp"]["machine_types"]] == ["a9-highgpu-8g"]


def test_aggregated_lists_follow_page_tokens_and_report_unreachable_zones(
    fake_gcp: FakeGcp,
) -> None:
    collected = collect_live(fake_gcp, projects=("ml-dev",))
    pages = [r.query.get("pageToken", [None])[0] for r in fake_gcp.requests
             if r.path.endswith("/aggregated/instances")]
    assert pages == [None, "2"]  # three zones, two per page
    assert collected.warnings == [
        "gcp: project ml-dev: zones/asia-east1-a: UNREACHABLE: zones/asia-east1-a is unreachable"]


def test_all_visible_projects_are_scanned_when_none_is_named(fake_gcp: FakeGcp) -> None:
    collected = collect_live(fake_gcp)
    assert {r.account for r in collected.resources} == {"ml-dev", "ml-prod"}
    assert any(r.path == "/v3/projects:search" for r in fake_gcp.requests)
    snapshot = collected.snapshot["gcp"]["projects"]
    assert [p["project"]["projectId"] for p in snapshot] == ["ml-dev", "ml-prod"]
    assert "machineType" in snapshot[0]["instances"][0]  # the API's own field names


# ---------------------------------------------------------------------------- scan findings


def test_scan_reports_spot_tags_and_off_hours(fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[
        str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, report, _ = scan(capsys, monkeypatch)
    assert code == 1
    assert failing(report) == {
        ("gpu-spot-required", "trainer-t4"),
        ("gpu-spot-required", "v100-stopped"),
        ("gpu-off-hours-shutdown", "trainer-t4"),  # a100-spot is exempt by label
        ("gpu-off-hours-shutdown", "l4-preemptible"),
        ("required-cost-tags", "l4-preemptible"),
    }
    stop = by_policy(report, "gpu-off-hours-shutdown")["trainer-t4"]["remediation"]
    assert stop["status"] == "planned" and stop["action"] == "stop"
    assert "google_compute_instance" in \
        by_policy(report, "gpu-spot-required")["trainer-t4"]["remediation"]["detail"]
    assert fake_gcp.mutations() == []  # dry-run: nothing but reads


def test_business_hours_have_no_off_hours_findings(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, report, _ = scan(capsys, monkeypatch, now=BUSINESS_HOURS)
    assert by_policy(report, "gpu-off-hours-shutdown") == {}
    assert set(by_policy(report, "gpu-spot-required")) == {"trainer-t4", "v100-stopped"}


def test_require_customer_key_flags_disks_without_cmek(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, plain, _ = scan(capsys, monkeypatch)
    assert by_policy(plain, "encryption-at-rest") == {}  # platform encryption passes
    overrides = tmp_path / "cmek.yaml"
    overrides.write_text("apiVersion: gpuwarden.io/v1\noverrides:\n  encryption-at-rest:\n"
                         "    parameters: {require_customer_key: true}\n")
    _, report, _ = scan(capsys, monkeypatch, "--policies", "builtin",
                        "--policies", str(overrides))
    assert set(by_policy(report, "encryption-at-rest")) == {"trainer-t4", "shared-data",
                                                            "serving"}


def test_snapshot_round_trip_gives_the_same_findings(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = tmp_path / "gcp.snapshot.json"
    _, live, _ = scan(capsys, monkeypatch, "--save-snapshot", str(saved))
    requests = len(fake_gcp.requests)
    code, out, err = run_cli(["scan", "--source", f"snapshot:{saved}", "--now", OFF_HOURS_ISO,
                              "--format", "json"], capsys, monkeypatch)
    assert code == 1, err
    assert failing(json.loads(out)) == failing(live)
    assert len(fake_gcp.requests) == requests  # replayed offline
    bundle = read_snapshot(saved)
    assert [p["project"]["projectId"] for p in bundle["gcp"]["projects"]] == ["ml-dev", "ml-prod"]


def test_recorded_fixture_matches_the_api_models_and_replays() -> None:
    bundle = json.loads((FIXTURES / "snapshot.json").read_text())
    for entry in bundle["gcp"]["projects"]:
        # strict parsing: an unknown or misspelled field name raises
        resourcemanager_v3.Project.from_json(json.dumps(entry["project"]))
        for item in entry["instances"]:
            compute_v1.Instance.from_json(json.dumps(item))
        for item in entry["disks"]:
            compute_v1.Disk.from_json(json.dumps(item))
    resources = load_snapshot_resources(FIXTURES / "snapshot.json", builtin_catalog())
    spot = {r.name: r.capacity for r in resources if r.category is Category.INSTANCE}
    assert spot == {"trainer-t4": Capacity.ON_DEMAND, "a100-spot": Capacity.SPOT,
                    "v100-stopped": Capacity.ON_DEMAND, "web": Capacity.ON_DEMAND,
                    "l4-preemptible": Capacity.SPOT, "serving": Capacity.ON_DEMAND}


def test_a_malformed_snapshot_section_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "Snapshot", "gcp": {"projects": [{"instances": []}]}}))
    with pytest.raises(InputError, match=r"gcp.projects\[0\] needs a 'project' mapping"):
        load_snapshot_resources(bad, builtin_catalog())


# ---------------------------------------------------------------------------- errors


def test_a_forbidden_project_is_a_warning_and_the_rest_is_scanned(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gcp.forbidden.add("ml-prod")
    _, report, err = scan(capsys, monkeypatch)
    assert ("gpu-off-hours-shutdown", "trainer-t4") in failing(report)
    assert report["summary"]["resources"] == 8  # ml-dev only
    assert ("gpuwarden: warning: gcp: project ml-prod: permission denied (HTTP 403): Required "
            "'compute.instances.list' permission for 'projects/ml-prod'; skipped") in err


def test_every_project_refused_is_an_input_error(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gcp.forbidden.update({"ml-dev", "ml-prod"})
    code, out, err = run_cli(["scan", "--source", "gcp"], capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gpuwarden: error: gcp: project ml-dev: permission denied (HTTP 403)")
    assert err.rstrip().endswith("(and 1 more projects)")


class StaticToken(Credentials):  # type: ignore[misc]
    """A bearer token that refreshes to itself: a 401 is refreshed once, then final."""

    def refresh(self, request: Any) -> None:
        self.token = "test-token"


def test_rejected_credentials_are_an_input_error(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gcp.reject_all = True
    monkeypatch.setattr(gcp, "SETTINGS", gcp.GcpSettings(
        credentials=StaticToken(), compute_endpoint=fake_gcp.url,
        resource_manager_endpoint=fake_gcp.url))
    code, _, err = run_cli(["scan", "--source", "gcp"], capsys, monkeypatch)
    assert code == 2
    assert err == ("gpuwarden: error: gcp: cannot list projects: credentials rejected (HTTP "
                   "401): Request had invalid authentication credentials. Expected OAuth 2 "
                   "access token.\n")


class ExpiredCredentials(Credentials):  # type: ignore[misc]
    """Credentials whose token expired and whose refresh is refused, as with a revoked key."""

    def refresh(self, request: Any) -> None:
        raise RefreshError("invalid_grant: Token has been expired or revoked.")


def test_expired_credentials_are_an_input_error(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gcp, "SETTINGS", gcp.GcpSettings(
        credentials=ExpiredCredentials(), compute_endpoint=fake_gcp.url,
        resource_manager_endpoint=fake_gcp.url))
    code, _, err = run_cli(["scan", "--source", "gcp", "--project", "ml-dev"], capsys,
                           monkeypatch)
    assert code == 2
    assert err == ("gpuwarden: error: gcp: project ml-dev: credentials rejected or expired: "
                   "invalid_grant: Token has been expired or revoked.\n")
    assert fake_gcp.requests == []  # refused before anything was sent


def test_missing_application_default_credentials_are_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gcp, "SETTINGS", gcp.GcpSettings())
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    code, _, err = run_cli(["scan", "--source", "gcp"], capsys, monkeypatch)
    assert code == 2
    assert err.startswith("gpuwarden: error: gcp: no Application Default Credentials found")


def test_throttling_is_retried_then_reported(
    fake_gcp: FakeGcp, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gcp.throttled = {"ml-dev": 1, "ml-prod": 10}
    collected = collect_live(fake_gcp)
    assert {r.account for r in collected.resources} == {"ml-dev"}  # one 429, then answered
    prod_lists = [r for r in fake_gcp.requests if r.path.startswith("/compute/v1/projects/ml-prod")]
    assert len(prod_lists) == 2  # max_attempts
    assert ("gcp: project ml-prod: throttled (HTTP 429) after retries: Quota exceeded for quota "
            "metric 'Read requests'; skipped") in collected.warnings


def test_retry_after_is_honoured_within_the_cap() -> None:
    from google.api_core.exceptions import TooManyRequests

    waits: list[float] = []
    response = type("Response", (), {"headers": {"Retry-After": "7"}})()
    calls = iter([TooManyRequests("slow down", response=response),
                  TooManyRequests("slow down", response=response), "ok"])

    def flaky() -> str:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    retry = gcp.RetryAfter(max_attempts=3, max_wait_s=5.0, sleep=waits.append)
    assert retry(flaky)() == "ok"
    assert waits == [5.0, 5.0]


# ---------------------------------------------------------------------------- enforce


def enforce(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, audit: Path,
            *extra: str) -> dict[str, Any]:
    _, report, _ = scan(capsys, monkeypatch, "--enforce", "--audit-log", str(audit), *extra)
    assert report["mode"] == "enforce"
    return report


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_enforce_stops_off_hours_instances_and_audits(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    audit = tmp_path / "audit.jsonl"
    report = enforce(capsys, monkeypatch, audit)
    stops = sorted(r.path for r in fake_gcp.mutations() if r.path.endswith("/stop"))
    assert stops == ["/compute/v1/projects/ml-dev/zones/europe-west4-b/instances/l4-preemptible/"
                     "stop", "/compute/v1/projects/ml-dev/zones/us-central1-a/instances/"
                     "trainer-t4/stop"]
    applied = by_policy(report, "gpu-off-hours-shutdown")
    assert {name: f["remediation"]["status"] for name, f in applied.items()} == {
        "trainer-t4": "applied", "l4-preemptible": "applied"}
    assert applied["trainer-t4"]["remediation"]["detail"] == (
        "stopped projects/ml-dev/zones/us-central1-a/instances/trainer-t4 (was RUNNING)")
    lines = audit_lines(audit)
    phases = {name: [(e["phase"], e["result"]) for e in lines
                     if e["resource"].endswith("/" + name)]
              for name in ("trainer-t4", "l4-preemptible")}
    assert phases == {name: [("before", None), ("after", "applied")] for name in phases}
    after = [e for e in lines if e["resource"].endswith("/trainer-t4")][1]
    assert after["before"] == {"status": "RUNNING"}
    assert after["after"]["operation_status"] == "RUNNING"
    where = {"project": "ml-dev", "zone": "us-central1-a", "instance": "trainer-t4"}
    assert after["request"] == {"instances.stop": where, "instances.setLabels": {
        **where, "labels": {STOPPED_BY_LABEL: "gpu-off-hours-shutdown_20261201t030000z",
                            RESUME_SCHEDULE_LABEL: "offu3du28m-fu2c19u29u3bonu3du28m-fu2c7u29u3b"
                                                   "tzu3dutc"}}}
    assert fake_gcp.find("ml-dev", "us-central1-a", "trainer-t4").labels[  # type: ignore[union-attr]
        STOPPED_BY_LABEL] == "gpu-off-hours-shutdown_20261201t030000z"
    assert (after["provider"], after["account"], after["region"], after["kind"]) == (
        "gcp", "ml-dev", "us-central1", "google_compute_instance")
    assert after["policy"] == "gpu-off-hours-shutdown" and after["action"] == "stop"
    assert len({e["run_id"] for e in lines}) == 1
    assert fake_gcp.find("ml-dev", "us-central1-a", "trainer-t4").status == "STOPPING"  # type: ignore[union-attr]
    assert fake_gcp.find("ml-prod", "us-east1-b", "serving").status == "RUNNING"  # type: ignore[union-attr]


def test_enforce_respects_the_blast_radius(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = enforce(capsys, monkeypatch, tmp_path / "a.jsonl", "--max-actions", "1")
    assert len([r for r in fake_gcp.mutations() if r.path.endswith("/stop")]) == 1
    statuses = sorted(f["remediation"]["status"]
                      for f in by_policy(report, "gpu-off-hours-shutdown").values())
    assert statuses == ["applied", "skipped"]
    skipped = next(f for f in by_policy(report, "gpu-off-hours-shutdown").values()
                   if f["remediation"]["status"] == "skipped")
    assert skipped["remediation"]["detail"] == "blast radius: --max-actions 1 reached"


def test_enforce_is_idempotent(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enforce(capsys, monkeypatch, tmp_path / "a.jsonl")
    first = len(fake_gcp.mutations())
    report = enforce(capsys, monkeypatch, tmp_path / "a.jsonl")
    assert len(fake_gcp.mutations()) == first == 4  # nothing left to do (2 × mark and stop)
    assert by_policy(report, "gpu-off-hours-shutdown") == {}  # now stopping: not running


def test_a_stale_listing_skips_an_instance_already_stopped(
    fake_gcp: FakeGcp, tmp_path: Path,
) -> None:
    from engine.pipeline import build_engine, evaluate_and_plan

    collected = collect_live(fake_gcp, projects=("ml-dev",))
    report = evaluate_and_plan(build_engine(None), collected.resources, OFF_HOURS)
    fake_gcp.find("ml-dev", "us-central1-a", "trainer-t4").status = "TERMINATED"  # type: ignore[union-attr]
    audit = tmp_path / "a.jsonl"
    done = apply_gcp_remediations(report, collected.resources, collected.clients["gcp"],
                                  max_actions=5, audit_log=audit)
    trainer = by_policy(done.to_json_dict(), "gpu-off-hours-shutdown")["trainer-t4"]
    assert trainer["remediation"]["status"] == "skipped"
    assert "already stopped (status TERMINATED)" in trainer["remediation"]["detail"]
    assert {r.path.rsplit("/", 2)[-2] for r in fake_gcp.mutations()} == {"l4-preemptible"}
    [check] = [e for e in audit_lines(audit) if e["resource"].endswith("/trainer-t4")]
    assert (check["phase"], check["result"], check["before"]) == (
        "check", "skipped", {"status": "TERMINATED"})
    assert check["reason"].endswith("is already stopped (status TERMINATED)")


def test_a_failed_stop_is_recorded_and_the_run_goes_on(
    fake_gcp: FakeGcp, tmp_path: Path,
) -> None:
    from engine.pipeline import build_engine, evaluate_and_plan

    collected = collect_live(fake_gcp, projects=("ml-dev",))
    report = evaluate_and_plan(build_engine(None), collected.resources, OFF_HOURS)
    fake_gcp.locked.add("l4-preemptible")  # stop answers 403
    fake_gcp.projects["ml-dev"].instances["zones/us-central1-a"].remove(
        fake_gcp.find("ml-dev", "us-central1-a", "trainer-t4"))  # deleted since the listing
    audit = tmp_path / "a.jsonl"
    done = apply_gcp_remediations(report, collected.resources, collected.clients["gcp"],
                                  max_actions=5, audit_log=audit)
    results = {name: (f["remediation"]["status"], f["remediation"]["detail"])
               for name, f in by_policy(done.to_json_dict(), "gpu-off-hours-shutdown").items()}
    l4 = "projects/ml-dev/zones/europe-west4-b/instances/l4-preemptible"
    assert results == {
        "l4-preemptible": ("failed", f"stop {l4} failed: permission denied (HTTP 403): Required "
                                     f"'compute.instances.setLabels' permission for '{l4}'"),
        "trainer-t4": ("skipped", "projects/ml-dev/zones/us-central1-a/instances/trainer-t4 no "
                                  "longer exists"),
    }
    failed = [e for e in audit_lines(audit) if e["result"] == "failed"]
    assert [e["phase"] for e in failed] == ["after"]
    assert failed[0]["error"].startswith("permission denied (HTTP 403)")


MARK_POLICY = """\
apiVersion: gpuwarden.io/v1
policies:
  - id: gpu-cost-labels-marked
    title: GPU instances without cost labels are marked
    severity: medium
    resources: [instance]
    parameters: {required_tags: [team, project, cost-center]}
    scope: {has-gpu: true}
    violation: {tags-missing: {}}
    message: "{{ r.name }} is missing {{ details.missing_tags | join(', ') }}"
    enforcement: {runtime: deny}
    remediations: [mark-violation]
"""


def test_mark_violation_sets_a_label_once(
    fake_gcp: FakeGcp, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = tmp_path / "mark.yaml"
    policy.write_text(MARK_POLICY)
    audit = tmp_path / "a.jsonl"
    days = {f"gpu-cost-labels-marked_{datetime.now(UTC):%Y%m%d}"}  # marked on the day it acts
    report = enforce(capsys, monkeypatch, audit, "--policies", str(policy))
    days.add(f"gpu-cost-labels-marked_{datetime.now(UTC):%Y%m%d}")
    [call] = fake_gcp.mutations()
    assert call.path.endswith("/instances/l4-preemptible/setLabels")
    assert call.body["labelFingerprint"] == "42WmSpB8rSM="  # the fingerprint read just before
    labels = call.body["labels"]
    assert labels.pop(VIOLATION_LABEL) in days and labels == {"team": "vision"}
    marked = by_policy(report, "gpu-cost-labels-marked")["l4-preemptible"]["remediation"]
    assert marked["status"] == "applied"
    again = enforce(capsys, monkeypatch, audit, "--policies", str(policy))
    assert len(fake_gcp.mutations()) == 1
    skipped = by_policy(again, "gpu-cost-labels-marked")["l4-preemptible"]["remediation"]
    assert skipped["status"] == "skipped" and "is already marked" in skipped["detail"]


def test_replaying_a_snapshot_imports_no_cloud_sdk(tmp_path: Path) -> None:
    """The snapshot readers live with the adapters, which import their SDKs only to connect."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    program = ("import sys\nfrom engine.cli import main\ntry:\n    main()\nfinally:\n"
               "    print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n")
    command = [sys.executable, "-c", program, "scan", "--format", "json",
               "--source", f"snapshot:{FIXTURES / 'snapshot.json'}",
               "--source", f"snapshot:{FIXTURES.parent / 'azure' / 'snapshot.json'}",
               "--now", OFF_HOURS_ISO, "-o", str(tmp_path / "report.json")]
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert {f["resource"]["provider"] for f in report["findings"]} == {"gcp", "azure"}
    loaded = set(result.stderr.split())
    assert {"engine.sources.gcp", "engine.sources.azure"} <= loaded
    assert not [m for m in loaded if m.startswith(("google.cloud", "google.auth", "azure"))]
