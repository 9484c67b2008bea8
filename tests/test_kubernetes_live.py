"""Cluster audit through the real `kubernetes` client against a loopback fake API server.

No API server can be installed here, so a small HTTP server on 127.0.0.1 serves Kubernetes API
JSON as kube-apiserver does: `*List` objects with `metadata.resourceVersion`, chunked by `limit`
with opaque `continue` tokens and `remainingItemCount`, single objects on GET, strategic-merge
PATCH with the resourceVersion precondition, and `Status` objects for errors. Every request is
recorded, so the tests can assert what was (and was not) sent.
"""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from engine.core.catalog import builtin_catalog
from engine.core.errors import InputError
from engine.core.model import Capacity, State
from engine.pipeline import build_engine, evaluate_and_plan
from engine.sources.kubernetes import ClusterState, cluster_resources, kubernetes_snapshot
from engine.sources.kubernetes.live import list_cluster
from engine.sources.snapshot import SnapshotContext, snapshot_resources
from remediations.kubernetes_actions import (
    PREVIOUS_REPLICAS,
    PREVIOUS_SUSPEND,
    apply_kubernetes_remediations,
)
from remediations.planning import RESUME_SCHEDULE_ANNOTATION, STOPPED_BY_ANNOTATION
from tests.conftest import OFF_HOURS, run_cli

OFF_HOURS_ISO = OFF_HOURS.isoformat()

# Collection paths of the fake API: path -> (kind, apiVersion, namespaced)
COLLECTIONS: dict[str, tuple[str, str]] = {
    "/api/v1/namespaces": ("Namespace", "v1"),
    "/api/v1/nodes": ("Node", "v1"),
    "/api/v1/pods": ("Pod", "v1"),
    "/apis/apps/v1/deployments": ("Deployment", "apps/v1"),
    "/apis/apps/v1/statefulsets": ("StatefulSet", "apps/v1"),
    "/apis/apps/v1/daemonsets": ("DaemonSet", "apps/v1"),
    "/apis/batch/v1/jobs": ("Job", "batch/v1"),
    "/apis/batch/v1/cronjobs": ("CronJob", "batch/v1"),
}
PLURALS = {kind: path.rsplit("/", 1)[1] for path, (kind, _) in COLLECTIONS.items()}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
TEAM = {"team": "ml", "project": "p", "cost-center": "c"}


# ---------------------------------------------------------------------------- estate


def pod_spec(gpus: int = 1, **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **extra}


def template(gpus: int = 1, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec(gpus, **extra)}


def meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "100",
                             "creationTimestamp": "2026-11-01T10:00:00Z", **extra}
    if namespace:
        found["namespace"] = namespace
    return found


def deployment(name: str, namespace: str, replicas: int, kind: str = "Deployment",
               labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                            "template": template()}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"metadata": meta(name, namespace, labels=labels or TEAM), "spec": spec}


def cronjob(name: str, namespace: str, suspend: bool = False) -> dict[str, Any]:
    job = {"template": template(restartPolicy="Never")}
    return {"metadata": meta(name, namespace, labels=TEAM),
            "spec": {"schedule": "0 * * * *", "suspend": suspend,
                     "jobTemplate": {"spec": job}}}


def estate() -> dict[str, list[dict[str, Any]]]:
    """Non-production namespace `ml` with three stoppable GPU workloads, production `prod`."""
    owned_pod = {"metadata": meta("trainer-a-7d9-x1", "ml", ownerReferences=[{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-a-7d9",
        "uid": "uid-rs", "controller": True}]), "spec": pod_spec(), "status": {"phase": "Running"}}
    bare_pod = {"metadata": meta("debug", "ml", labels=TEAM),
                "spec": pod_spec(nodeName="gpu-spot-1"), "status": {"phase": "Running"}}
    done_pod = {"metadata": meta("done", "ml"), "spec": pod_spec(),
                "status": {"phase": "Succeeded"}}
    finished_job = {"metadata": meta("old-job", "ml"),
                    "spec": {"template": template(restartPolicy="Never")},
                    "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    return {
        "Namespace": [
            {"metadata": meta("ml", labels={"env": "dev"})},
            {"metadata": meta("prod", labels={"env": "production"})},
        ],
        "Node": [
            {"metadata": meta("gpu-spot-1", labels={
                "karpenter.sh/capacity-type": "spot",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
             "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "8"}}},
        ],
        "Deployment": [
            deployment("trainer-a", "ml", 3),
            deployment("serving", "prod", 2),
        ],
        "StatefulSet": [deployment("notebook", "ml", 1, kind="StatefulSet")],
        "DaemonSet": [],
        "Job": [finished_job],
        "CronJob": [cronjob("nightly", "ml")],
        "Pod": [owned_pod, bare_pod, done_pod],
    }


# ---------------------------------------------------------------------------- fake API server


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    content_type: str


@dataclass
class FakeApi:
    objects: dict[str, list[dict[str, Any]]]
    requests: list[Recorded] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)  # names whose PATCH answers 403
    resource_version: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mutations(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in MUTATING]

    def find(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        for obj in self.objects[kind]:
            metadata = obj["metadata"]
            if metadata["name"] == name and metadata.get("namespace") == namespace:
                return obj
        return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:  # merge patches delete a key set to null
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def make_handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> tuple[str, dict[str, list[str]], Any]:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            api.requests.append(Recorded(self.command, url.path, query, body,
                                         self.headers.get("Content-Type") or ""))
            return url.path, query, body

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path, query, _ = self._record()
            with api.lock:
                if path in COLLECTIONS and f"list:{COLLECTIONS[path][0]}" in api.forbidden:
                    self._send(403, _status(403, "Forbidden", "nodes is forbidden"))
                    return
                if path in COLLECTIONS:
                    self._send(200, self._list(path, query))
                    return
                found = self._object(path)
            if found is None:
                self._send(404, _status(404, "NotFound", f"{path} not found"))
            else:
                self._send(200, self._served(path.split("/")[-2], found))

        def do_PATCH(self) -> None:
            path, _, body = self._record()
            with api.lock:
                found = self._object(path)
                if found is None:
                    self._send(404, _status(404, "NotFound", f"{path} not found"))
                    return
                name = found["metadata"]["name"]
                if name in api.forbidden:
                    self._send(403, _status(403, "Forbidden", f'"{name}" is forbidden: User '
                                            '"gpuwarden" cannot patch resource'))
                    return
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != found["metadata"]["resourceVersion"]:
                    self._send(409, _status(409, "Conflict", "the object has been modified"))
                    return
                _merge(found, body)
                api.resource_version += 1
                found["metadata"]["resourceVersion"] = str(api.resource_version)
                self._send(200, self._served(path.split("/")[-2], found))

        def _list(self, path: str, query: dict[str, list[str]]) -> dict[str, Any]:
            kind, api_version = COLLECTIONS[path]
            items = api.objects[kind]
            start = int(base64.b64decode(query["continue"][0])) if "continue" in query else 0
            limit = int(query["limit"][0]) if "limit" in query else len(items)
            page = items[start:start + limit]
            list_meta: dict[str, Any] = {"resourceVersion": str(api.resource_version)}
            if start + limit < len(items):
                list_meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                list_meta["remainingItemCount"] = len(items) - start - limit
            return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": list_meta,
                    "items": copy.deepcopy(page)}

        def _object(self, path: str) -> dict[str, Any] | None:
            # /apis/<group>/<version>/namespaces/<ns>/<plural>/<name>
            parts = path.strip("/").split("/")
            if len(parts) < 4 or parts[-4] != "namespaces":
                return None
            namespace, plural, name = parts[-3], parts[-2], parts[-1]
            kind = next((k for k, p in PLURALS.items() if p == plural), None)
            if kind is None:
                return None
            return api.find(kind, namespace, name)

        def _served(self, kind_path: str, found: dict[str, Any]) -> dict[str, Any]:
            """The stored object as the API serves it: a copy with kind and apiVersion."""
            kind, api_version = next(v for k, v in COLLECTIONS.items()
                                     if k.rsplit("/", 1)[1] == kind_path)
            return {"kind": kind, "apiVersion": api_version, **copy.deepcopy(found)}

    return Handler


@pytest.fixture
def fake_api() -> Iterator[tuple[FakeApi, str]]:
    api = FakeApi(estate())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def kubeconfig(fake_api: tuple[FakeApi, str], tmp_path: Path) -> Path:
    _, url = fake_api
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab-cluster", "cluster": {"server": url}}],
        "users": [{"name": "auditor", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab-cluster", "user": "auditor"}}],
    }))
    return path


def api_client(url: str) -> Any:
    from kubernetes import client  # type: ignore[import-untyped]

    configuration = client.Configuration(host=url)
    return client.ApiClient(configuration)



def scan_args(kubeconfig: Path, *extra: str) -> list[str]:
    return ["scan", "--source", "k8s", "--kubeconfig", str(kubeconfig), "-f", "json",
            "--now", OFF_HOURS.isoformat(), *extra]


def off_hours(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["resource"]["id"]: f for f in report["findings"]
            if f["policy"] == "gpu-off-hours-shutdown"}


# ---------------------------------------------------------------------------- listing


def test_list_cluster_follows_continue_tokens(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    state = list_cluster(api_client(url), chunk=1)
    deployment_requests = [r for r in api.requests if r.path == "/apis/apps/v1/deployments"]
    assert [r.query.get("limit") for r in deployment_requests] == [["1"], ["1"]]
    assert "continue" not in deployment_requests[0].query
    assert deployment_requests[1].query["continue"] == [base64.b64encode(b"1").decode()]
    assert [n["metadata"]["name"] for n in state.namespaces] == ["ml", "prod"]
    names = {(o["kind"], o["metadata"]["name"]) for o in state.workloads}
    assert names == {("Deployment", "trainer-a"), ("Deployment", "serving"),
                     ("StatefulSet", "notebook"), ("CronJob", "nightly"), ("Pod", "debug")}
    assert not api.mutations()


def test_objects_are_plain_api_dicts(fake_api: tuple[FakeApi, str]) -> None:
    _, url = fake_api
    state = list_cluster(api_client(url))
    trainer = next(o for o in state.workloads if o["metadata"]["name"] == "trainer-a")
    assert trainer["kind"] == "Deployment" and trainer["apiVersion"] == "apps/v1"
    assert trainer["spec"]["replicas"] == 3
    limits = trainer["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1"}
    assert trainer["metadata"]["creationTimestamp"].startswith("2026-11-01T10:00:00")
    json.dumps(trainer)  # serializable as is


def test_cluster_resources_normalize_with_namespace_labels_and_node_capacity(
    fake_api: tuple[FakeApi, str],
) -> None:
    _, url = fake_api
    state = list_cluster(api_client(url), cluster="lab")
    resources = {r.id: r for r in cluster_resources(state, builtin_catalog())}
    trainer = resources["Deployment/ml/trainer-a"]
    assert trainer.count == 3 and trainer.gpu is not None and trainer.gpu.count == 1
    assert trainer.namespace_labels == {"env": "dev"} and trainer.cluster == "lab"
    assert trainer.state is State.RUNNING
    assert resources["Deployment/prod/serving"].namespace_labels == {"env": "production"}
    # the bare pod runs on a spot node: the node's labels decide its capacity
    assert resources["Pod/ml/debug"].capacity is Capacity.SPOT
    assert trainer.capacity is Capacity.ON_DEMAND


def test_scaled_to_zero_and_suspended_workloads_are_stopped(
    fake_api: tuple[FakeApi, str],
) -> None:
    api, url = fake_api
    api.objects["Deployment"][0]["spec"]["replicas"] = 0
    api.objects["CronJob"][0]["spec"]["suspend"] = True
    resources = {r.id: r for r in cluster_resources(list_cluster(api_client(url)))}
    assert resources["Deployment/ml/trainer-a"].state is State.STOPPED
    assert resources["CronJob/ml/nightly"].state is State.STOPPED
    assert resources["StatefulSet/ml/notebook"].state is State.RUNNING


def test_snapshot_section_reads_back_the_same_resources(fake_api: tuple[FakeApi, str]) -> None:
    _, url = fake_api
    state = list_cluster(api_client(url), cluster="lab")
    section = kubernetes_snapshot(state)
    assert section["cluster"] == "lab"
    again = snapshot_resources({"kubernetes": section},
                               SnapshotContext("snap.json", builtin_catalog()))
    assert sorted(r.id for r in again) == sorted(r.id for r in cluster_resources(state))


def test_api_errors_are_one_line_input_errors(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    api.forbidden.add("list:Node")
    with pytest.raises(InputError) as raised:
        list_cluster(api_client(url))
    assert str(raised.value) == "kubernetes: listing Nodes failed: HTTP 403 Forbidden"



def test_unreachable_api_server_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    }))
    from kubernetes import client

    monkeypatch.setattr(client.Configuration, "retries", 0, raising=False)
    code, _, err = run_cli(["scan", "--source", "k8s", "--kubeconfig", str(config)], capsys,
                           monkeypatch)
    assert code == 2
    assert err.startswith("gpuwarden: error: kubernetes: cannot reach the API server")
    assert len(err.strip().splitlines()) == 1


def test_missing_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run_cli(["scan", "--source", "k8s", "--kubeconfig",
                            str(tmp_path / "absent")], capsys, monkeypatch)
    assert code == 2 and "kubernetes: " in err and "Traceback" not in err


# ---------------------------------------------------------------------------- CLI: dry-run


def test_scan_k8s_reports_off_hours_and_mutates_nothing(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(scan_args(kubeconfig), capsys, monkeypatch)
    report = json.loads(out)
    assert code == 1 and report["mode"] == "dry-run"
    found = off_hours(report)
    assert set(found) == {"Deployment/ml/trainer-a", "StatefulSet/ml/notebook",
                          "CronJob/ml/nightly", "Pod/ml/debug"}
    assert found["Deployment/ml/trainer-a"]["remediation"]["status"] == "planned"
    assert found["Deployment/ml/trainer-a"]["remediation"]["detail"].startswith("would scale")
    assert not api.mutations()
    assert not (tmp_path / "gpuwarden-audit.jsonl").exists()


def test_scan_k8s_in_business_hours_has_no_off_hours_findings(
    fake_api: tuple[FakeApi, str], kubeconfig: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = scan_args(kubeconfig)
    args[args.index("--now") + 1] = "2026-12-01T12:00:00Z"
    _, out, _ = run_cli(args, capsys, monkeypatch)
    assert off_hours(json.loads(out)) == {}


def test_enforce_needs_a_live_source(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(["scan", "--demo", "--enforce"], capsys, monkeypatch)
    assert code == 2 and "live --source" in err


# ---------------------------------------------------------------------------- CLI: enforce


def enforce(kubeconfig: Path, audit: Path, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, Any]:
    _, out, _ = run_cli(scan_args(kubeconfig, "--enforce", "--audit-log", str(audit), *extra),
                        capsys, monkeypatch)
    return dict(json.loads(out))


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_enforce_scales_to_zero_suspends_and_audits(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    audit = tmp_path / "audit.jsonl"
    report = enforce(kubeconfig, audit, capsys, monkeypatch)
    patches = {r.path: r for r in api.mutations()}
    assert set(patches) == {
        "/apis/apps/v1/namespaces/ml/deployments/trainer-a",
        "/apis/apps/v1/namespaces/ml/statefulsets/notebook",
        "/apis/batch/v1/namespaces/ml/cronjobs/nightly",
    }
    assert all(r.method == "PATCH" for r in api.mutations())
    trainer = patches["/apis/apps/v1/namespaces/ml/deployments/trainer-a"]
    assert trainer.content_type == "application/strategic-merge-patch+json"
    assert trainer.body["spec"] == {"replicas": 0}
    assert trainer.body["metadata"]["annotations"] == {
        PREVIOUS_REPLICAS: "3", STOPPED_BY_ANNOTATION: f"gpu-off-hours-shutdown@{OFF_HOURS_ISO}",
        RESUME_SCHEDULE_ANNOTATION: "off=(M-F,19);on=(M-F,7);tz=utc"}
    assert trainer.body["metadata"]["resourceVersion"] == "100"
    nightly = patches["/apis/batch/v1/namespaces/ml/cronjobs/nightly"]
    assert nightly.body["spec"] == {"suspend": True}
    assert nightly.body["metadata"]["annotations"] == {
        PREVIOUS_SUSPEND: "false", STOPPED_BY_ANNOTATION: f"gpu-off-hours-shutdown@{OFF_HOURS_ISO}",
        RESUME_SCHEDULE_ANNOTATION: "off=(M-F,19);on=(M-F,7);tz=utc"}
    assert api.find("Deployment", "ml", "trainer-a")["spec"]["replicas"] == 0  # type: ignore[index]
    assert api.find("Deployment", "prod", "serving")["spec"]["replicas"] == 2  # type: ignore[index]

    found = off_hours(report)
    assert report["mode"] == "enforce"
    assert found["Deployment/ml/trainer-a"]["remediation"]["status"] == "applied"
    assert found["CronJob/ml/nightly"]["remediation"]["status"] == "applied"
    assert found["Pod/ml/debug"]["remediation"]["status"] == "skipped"

    lines = audit_lines(audit)
    trainer_lines = [line for line in lines if line["target"]["name"] == "trainer-a"]
    assert [line["phase"] for line in trainer_lines] == ["before", "after"]
    before, after = trainer_lines
    assert before["before"] == {"replicas": 3} and before["patch"]["spec"] == {"replicas": 0}
    assert after["after"] == {"replicas": 0} and after["result"] == "applied"
    assert after["policy"] == "gpu-off-hours-shutdown" and after["actor"].startswith("gpuwarden/")
    assert datetime.fromisoformat(after["time"]).tzinfo is not None
    assert after["target"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                               "namespace": "ml", "name": "trainer-a"}


def test_enforce_respects_max_actions(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    report = enforce(kubeconfig, tmp_path / "a.jsonl", capsys, monkeypatch, "--max-actions", "1")
    assert len(api.mutations()) == 1
    statuses = sorted(f["remediation"]["status"] for f in off_hours(report).values()
                      if f["resource"]["kind"] != "Pod")
    assert statuses == ["applied", "skipped", "skipped"]
    skipped = [f for f in off_hours(report).values()
               if f["remediation"]["status"] == "skipped" and f["resource"]["kind"] != "Pod"]
    assert all("--max-actions 1" in f["remediation"]["detail"] for f in skipped)


def test_enforce_is_idempotent(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    enforce(kubeconfig, tmp_path / "a.jsonl", capsys, monkeypatch)
    first = len(api.mutations())
    report = enforce(kubeconfig, tmp_path / "a.jsonl", capsys, monkeypatch)
    assert first == 3 and len(api.mutations()) == first
    assert "Deployment/ml/trainer-a" not in off_hours(report)  # stopped now


def test_stale_listing_skips_a_workload_already_at_zero(fake_api: tuple[FakeApi, str],
                                                         tmp_path: Path) -> None:
    api, url = fake_api
    client = api_client(url)
    resources = cluster_resources(list_cluster(client))
    engine = build_engine(None)
    report = evaluate_and_plan(engine, resources, OFF_HOURS)
    api.find("Deployment", "ml", "trainer-a")["spec"]["replicas"] = 0  # type: ignore[index]
    audit = tmp_path / "audit.jsonl"
    done = apply_kubernetes_remediations(report, resources, client, max_actions=10,
                                         audit_log=audit,
                                         now=lambda: datetime(2026, 12, 1, 3, tzinfo=UTC))
    trainer = next(f for f in done.findings if f.resource.id == "Deployment/ml/trainer-a"
                   and f.policy == "gpu-off-hours-shutdown")
    assert trainer.remediation is not None and trainer.remediation.status == "skipped"
    assert "already stopped" in trainer.remediation.detail
    assert "/apis/apps/v1/namespaces/ml/deployments/trainer-a" not in {
        r.path for r in api.mutations()}
    check = [line for line in audit_lines(audit) if line["target"]["name"] == "trainer-a"]
    assert [(line["phase"], line["result"]) for line in check] == [("check", "skipped")]
    assert check[0]["time"] == "2026-12-01T03:00:00+00:00"


def test_a_forbidden_patch_is_recorded_and_the_run_goes_on(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    api.forbidden.add("notebook")
    audit = tmp_path / "audit.jsonl"
    found = off_hours(enforce(kubeconfig, audit, capsys, monkeypatch))
    notebook = found["StatefulSet/ml/notebook"]["remediation"]
    assert notebook["status"] == "failed" and "HTTP 403" in notebook["detail"]
    assert found["Deployment/ml/trainer-a"]["remediation"]["status"] == "applied"
    assert found["CronJob/ml/nightly"]["remediation"]["status"] == "applied"
    failed = [line for line in audit_lines(audit)
              if line["target"]["name"] == "notebook" and line["phase"] == "after"]
    assert failed[0]["result"] == "failed" and "403" in failed[0]["error"]


def test_unwritable_audit_log_changes_nothing(
    fake_api: tuple[FakeApi, str], kubeconfig: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = fake_api
    code, _, err = run_cli(scan_args(kubeconfig, "--enforce", "--audit-log",
                                     str(tmp_path / "missing-dir" / "a.jsonl")),
                           capsys, monkeypatch)
    assert code == 2 and "cannot write audit log" in err
    assert not api.mutations()


def test_state_without_client_module_section() -> None:
    state = ClusterState(namespaces=[{"kind": "Namespace", "metadata": {"name": "a"}}])
    assert kubernetes_snapshot(state) == {"objects": state.namespaces}
