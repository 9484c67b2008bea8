"""Admission webhook over real TLS: the uvicorn server runs in a thread on 127.0.0.1 with
trustme certificates; AdmissionReview v1 bodies are posted with httpx as kube-apiserver sends
them (the reference kubewarden requests, wrapped when bare; the kyverno / NVIDIA GPU manifests
wrapped into CREATE reviews; crafted GPU workloads).

No API server can be installed here: the kubernetes-client path is tested against a loopback
HTTP server that serves NamespaceList / NodeList JSON as the API server does (chunked lists).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import jsonpatch
import pytest
import trustme
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from engine.cli import app as cli_app
from engine.core.evaluate import Engine
from engine.core.model import Resource
from engine.loading.policies import load_policies
from engine.sources.kubernetes import load_manifests, workload_resource
from engine.webhook.admission import AdmissionSettings, Evaluation, PolicyEvaluator
from engine.webhook.app import WebhookSettings, create_app, parse_go_duration
from engine.webhook.caches import ClusterCache, KubernetesLister, StaticLister
from engine.webhook.review import MAX_BODY_BYTES
from engine.webhook.tls import ServerSettings, WebhookServer, webhook_server
from tests.conftest import BUSINESS_HOURS, OFF_HOURS, REFERENCE

REPO = Path(__file__).resolve().parents[1]
ADMISSION = REFERENCE / "admission"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-42"}
SPOT = {"karpenter.sh/capacity-type": "spot"}
KIND_RESOURCES = {"Pod": ("", "v1", "pods"), "Deployment": ("apps", "v1", "deployments"),
                  "Job": ("batch", "v1", "jobs"), "CronJob": ("batch", "v1", "cronjobs"),
                  "StatefulSet": ("apps", "v1", "statefulsets")}

NAMESPACES = [
    {"metadata": {"name": "ml", "labels": {"kubernetes.io/metadata.name": "ml"}}},
    {"metadata": {"name": "prod-ml", "labels": {"env": "prod"}}},
    {"metadata": {"name": "default", "labels": {}}},
]
NODES = [
    {"metadata": {"name": "a100-1", "labels": {"nvidia.com/gpu.product": A100,
                                               "pool": "a100", **SPOT}},
     "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "4",
                                "nvidia.com/mig-1g.10gb": "14"}}},
    {"metadata": {"name": "h100-1", "labels": {"nvidia.com/gpu.product": H100, "pool": "h100",
                                               **SPOT}},
     "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}}},
    {"metadata": {"name": "cpu-1", "labels": {"pool": "cpu"}},
     "status": {"allocatable": {"cpu": "16"}}},
]


# ---------------------------------------------------------------------------- review bodies


def envelope(request: dict[str, Any]) -> dict[str, Any]:
    """A bare AdmissionRequest wrapped as kube-apiserver sends it; full reviews unchanged."""
    if request.get("kind") == "AdmissionReview":
        return request
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def reference_reviews() -> dict[str, dict[str, Any]]:
    return {p.name: envelope(json.loads(p.read_text()))
            for p in sorted(ADMISSION.glob("kw-*.json"))}


def reference_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in sorted(ADMISSION.glob("*.yaml")):
        objects.extend(load_manifests(path.read_text(), str(path)))
    return objects


def review(obj: dict[str, Any], *, operation: str = "CREATE", dry_run: bool = False,
           old: dict[str, Any] | None = None, namespace: str | None = None) -> dict[str, Any]:
    kind = obj.get("kind", "Pod")
    group, version, plural = KIND_RESOURCES.get(kind, ("", "v1", kind.lower() + "s"))
    metadata = obj.get("metadata", {})
    ns = namespace or metadata.get("namespace") or "default"
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": metadata.get("name", ""),
        "namespace": ns,
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return envelope(request)


def gpu_workload(kind: str = "Deployment", *, name: str = "trainer", namespace: str = "ml",
                 labels: dict[str, str] | None = None, selector: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, gpus: int | str = 1,
                 ) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{
        "name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "32Gi"}}}]}
    if selector:
        pod_spec["nodeSelector"] = dict(selector)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": dict(labels or {}),
                                # spot-checkpointing-required: these workloads checkpoint
                                "annotations": {"gpuwarden.io/checkpoint": "s3://ckpt/trainer",
                                                **(annotations or {})}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    template = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
    if kind == "CronJob":
        pod_spec["restartPolicy"] = "Never"
        spec: dict[str, Any] = {"schedule": "0 3 * * *",
                                "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        spec = {"template": template}
    else:
        spec = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
    api = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": spec}


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return patch


# ---------------------------------------------------------------------------- servers


class InProcessClient:
    """The ASGI app called in-process (no sockets, no lifespan) through httpx.ASGITransport,
    on an event loop of its own: fast enough for fuzzing."""

    def __init__(self, app: Any):
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                      base_url="http://webhook")

    def post(self, path: str, content: bytes) -> httpx.Response:
        return self.loop.run_until_complete(self.http.post(path, content=content))

    def __enter__(self) -> InProcessClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Certs:
    ca: trustme.CA
    leaf: trustme.LeafCert
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context

    def rotate(self, leaf: trustme.LeafCert | None = None) -> trustme.LeafCert:
        """Write a new pair the way kubelet updates a Secret volume: whole files, renamed in."""
        self.leaf = leaf or self.ca.issue_cert("127.0.0.1", "localhost")
        for data, path in ((self.leaf.private_key_pem.bytes(), self.key),
                           (b"".join(b.bytes() for b in self.leaf.cert_chain_pems), self.cert)):
            scratch = path.with_suffix(".new")
            scratch.write_bytes(data)
            os.replace(scratch, path)
        return self.leaf


def make_certs(directory: Path) -> Certs:
    ca = trustme.CA()
    certs = Certs(ca, ca.issue_cert("127.0.0.1", "localhost"), directory / "tls.crt",
                  directory / "tls.key")
    certs.rotate(certs.leaf)
    return certs


def serial_of(leaf: trustme.LeafCert) -> int:
    return x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).serial_number


class RunningServer:
    def __init__(self, server: WebhookServer, certs: Certs | None):
        self.server = server
        self.certs = certs
        self.thread = threading.Thread(target=server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("webhook server did not start")
            time.sleep(0.01)
        port = server.bound_port
        assert port is not None
        self.port = port
        scheme = "http" if certs is None else "https"
        self.url = f"{scheme}://127.0.0.1:{port}"

    @property
    def app(self) -> Any:
        return self.server.config.app

    def client(self) -> httpx.Client:
        verify: ssl.SSLContext | bool = self.certs.client_context() if self.certs else False
        return httpx.Client(base_url=self.url, verify=verify, timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start_server(app: Any, certs: Certs | None, **settings: Any) -> RunningServer:
    server_settings = ServerSettings(host="127.0.0.1", port=0,
                                     cert=certs.cert if certs else None,
                                     key=certs.key if certs else None,
                                     insecure_http=certs is None, log_level="warning",
                                     **settings)
    return RunningServer(webhook_server(app, server_settings), certs)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_policies(["builtin"]))


def business_hours() -> datetime:
    """The clock of the tests that are not about time: the off-hours policy stays quiet."""
    return BUSINESS_HOURS


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock(BUSINESS_HOURS)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(engine: Engine, certs: Certs, clock: Clock) -> Iterator[RunningServer]:
    caches = ClusterCache(StaticLister(NAMESPACES, NODES), resync_seconds=3600)
    app = create_app(engine, caches=caches, clock=clock)
    running = start_server(app, certs)
    with running.client() as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
    yield running
    running.stop()


@pytest.fixture
def client(server: RunningServer, clock: Clock) -> Iterator[httpx.Client]:
    clock.now = BUSINESS_HOURS
    with server.client() as http:
        yield http
    clock.now = BUSINESS_HOURS


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def post(client: httpx.Client, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(f"/{endpoint}", json=body)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    for warning in response.get("warnings", []):
        assert len(warning) <= 120 and "\n" not in warning
    for key in response.get("auditAnnotations", {}):
        assert "/" not in key and 0 < len(key) <= 63
    return response


# ---------------------------------------------------------------------------- reference data


def test_reference_requests_without_gpus_are_allowed_untouched(client: httpx.Client) -> None:
    reviews = reference_reviews()
    assert len(reviews) == 11
    operations = set()
    for name, body in reviews.items():
        operations.add(body["request"]["operation"])
        for endpoint in ("validate", "mutate"):
            response = post(client, endpoint, body)
            assert response["allowed"] is True, name
            assert "status" not in response and "patch" not in response, name
            assert "warnings" not in response, name
    assert operations == {"CREATE", "UPDATE", "DELETE"}


def test_reference_gpu_manifests_are_denied_naming_each_policy_and_fix(
    client: httpx.Client,
) -> None:
    kinds = set()
    for obj in reference_objects():
        resource = workload_resource(obj)
        assert resource is not None
        response = post(client, "validate", review(obj))
        if resource.gpu is None or not resource.gpu.count:
            assert response["allowed"] is True
            continue
        kinds.add(obj["kind"])
        assert response["allowed"] is False
        assert response["status"]["code"] == 403
        message = response["status"]["message"]
        assert f"{obj['kind']}/" in message
        for policy_id, fix in (("gpu-spot-required", "Use spot/preemptible capacity"),
                               ("required-cost-tags", "Add the missing tags")):
            assert f"[{policy_id}]" in message and fix in message
            assert response["auditAnnotations"][policy_id] == "fail"
    assert kinds == {"Pod", "Deployment", "CronJob", "Job"}


def test_reference_gpu_manifests_are_patched_onto_spot_by_mutate(client: httpx.Client) -> None:
    patched_kinds = set()
    for obj in reference_objects():
        resource = workload_resource(obj)
        assert resource is not None
        response = post(client, "mutate", review(obj))
        assert response["allowed"] is True and "status" not in response
        patch = decoded_patch(response)
        if resource.gpu is None or not resource.gpu.count:
            assert patch == []
            continue
        patched_kinds.add(obj["kind"])
        after = jsonpatch.apply_patch(obj, patch)
        assert decoded_patch(post(client, "mutate", review(after))) == []
        verdict = post(client, "validate", review(after))
        assert "gpu-spot-required" not in verdict.get("auditAnnotations", {})
    assert patched_kinds == {"Pod", "Deployment", "CronJob", "Job"}


# ---------------------------------------------------------------------------- crafted GPU cases


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "Job", "CronJob"])
def test_compliant_gpu_workload_is_allowed_quietly(client: httpx.Client, kind: str) -> None:
    obj = gpu_workload(kind, labels=TAGS, selector={**SPOT, "pool": "h100"},
                       annotations={"gpuwarden.io/gpu-memory": "70Gi"})
    for endpoint in ("validate", "mutate"):
        response = post(client, endpoint, review(obj))
        assert response == {"uid": response["uid"], "allowed": True}


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "Job", "CronJob"])
def test_warn_policies_become_warnings_not_denials(
    client: httpx.Client, clock: Clock, kind: str
) -> None:
    clock.now = OFF_HOURS
    obj = gpu_workload(kind, labels=TAGS, selector={**SPOT, "nvidia.com/gpu.product": A100},
                       annotations={"gpuwarden.io/gpu-memory": "8Gi"})
    response = post(client, "validate", review(obj))
    assert response["allowed"] is True and "status" not in response
    warnings = response["warnings"]
    assert len(warnings) == 2
    assert warnings[0].startswith("[gpu-mig-for-small-jobs] ") and "nvidia.com/mig-1g.10gb" in (
        warnings[0])
    assert warnings[1].startswith("[gpu-off-hours-shutdown] ")
    assert response["auditAnnotations"] == {"gpu-mig-for-small-jobs": "fail",
                                            "gpu-off-hours-shutdown": "fail"}


def test_long_warnings_are_clipped_to_120_characters(client: httpx.Client, clock: Clock) -> None:
    clock.now = OFF_HOURS
    obj = gpu_workload("Deployment", name="x" * 200, labels=TAGS, selector=SPOT)
    obj["spec"]["selector"]["matchLabels"] = obj["spec"]["template"]["metadata"]["labels"] = {
        "app": "x" * 63}  # a label value's limit; the 200-character name is allowed
    response = post(client, "validate", review(obj))
    (warning,) = response["warnings"]
    assert len(warning) == 120 and warning.endswith("...")
    assert warning.startswith("[gpu-off-hours-shutdown] xxxx")


def test_production_comes_from_the_cached_namespace_labels(client: httpx.Client) -> None:
    in_prod = post(client, "validate", review(gpu_workload(namespace="prod-ml", labels=TAGS)))
    assert in_prod == {"uid": in_prod["uid"], "allowed": True}
    elsewhere = post(client, "validate", review(gpu_workload(namespace="ml", labels=TAGS)))
    assert elsewhere["allowed"] is False
    assert elsewhere["auditAnnotations"] == {"gpu-spot-required": "fail"}
    own_label = gpu_workload(namespace="ml", labels={**TAGS, "env": "production"})
    assert post(client, "validate", review(own_label))["allowed"] is True


def test_exempt_annotation_lets_the_workload_through(client: httpx.Client) -> None:
    obj = gpu_workload(annotations={"gpuwarden.io/exempt": "gpu-spot-required,"
                                                           "required-cost-tags"})
    response = post(client, "validate", review(obj))
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {
        "exemption": "exempt:gpu-spot-required,required-cost-tags"}


MEMORY_CAP_POLICY = """
apiVersion: gpuwarden.io/v1
policies:
  - id: gpu-memory-cap
    title: Declared GPU memory stays under 40 GiB
    severity: high
    resources: [workload]
    scope: {has-gpu: true}
    violation: {field: gpu.declared_memory_gib, op: gt, value: 40}
    message: "{{ r.name }} declares more than 40 GiB"
    help: Split the job.
    enforcement: {plan: deny, admission: deny, runtime: audit}
"""


def test_undecidable_deny_policy_warns_instead_of_denying(tmp_path: Path) -> None:
    policy = tmp_path / "cap.yaml"
    policy.write_text(MEMORY_CAP_POLICY)
    app = create_app(Engine(load_policies([str(policy)])), clock=Clock(BUSINESS_HOURS))
    verdicts = {}
    with InProcessClient(app) as client:
        for declared in ("80Gi", "lots", "8Gi"):
            body = review(gpu_workload(annotations={"gpuwarden.io/gpu-memory": declared}))
            reply = client.post("/validate", content=json.dumps(body).encode())
            verdicts[declared] = reply.json()["response"]
    assert verdicts["80Gi"]["allowed"] is False
    assert "[gpu-memory-cap] trainer declares more than 40 GiB. Fix: Split the job." in (
        verdicts["80Gi"]["status"]["message"])
    undecided = verdicts["lots"]
    assert undecided["allowed"] is True
    assert undecided["auditAnnotations"] == {"gpu-memory-cap": "unknown"}
    (warning,) = undecided["warnings"]
    assert warning.startswith("[gpu-memory-cap] trainer: cannot decide")
    assert verdicts["8Gi"] == {"uid": verdicts["8Gi"]["uid"], "allowed": True}


def test_mutate_pins_spot_and_swaps_mig_idempotently(client: httpx.Client) -> None:
    obj = gpu_workload("Deployment", labels=TAGS, selector={"nvidia.com/gpu.product": A100},
                       annotations={"gpuwarden.io/gpu-memory": "8Gi"})
    response = post(client, "mutate", review(obj))
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {"gpu-spot-required": "patched",
                                            "gpu-mig-for-small-jobs": "patched"}
    patch = decoded_patch(response)
    paths = [op["path"] for op in patch]
    assert "/spec/template/spec/nodeSelector/karpenter.sh~1capacity-type" in paths
    assert "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu" in paths
    after = jsonpatch.apply_patch(obj, patch)
    pod_spec = after["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"nvidia.com/gpu.product": A100, **SPOT}
    assert pod_spec["containers"][0]["resources"]["limits"] == {
        "memory": "32Gi", "nvidia.com/mig-1g.10gb": 1}
    again = post(client, "mutate", review(after))
    assert again == {"uid": again["uid"], "allowed": True}
    verdict = post(client, "validate", review(after))
    assert verdict == {"uid": verdict["uid"], "allowed": True}


def test_gpu_model_comes_from_the_nodes_a_workload_can_land_on(client: httpx.Client) -> None:
    on_a100_pool = gpu_workload(labels=TAGS, selector={**SPOT, "pool": "a100"},
                                annotations={"gpuwarden.io/gpu-memory": "8Gi"})
    response = post(client, "mutate", review(on_a100_pool))
    assert [op["path"] for op in decoded_patch(response)] == [
        "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu",
        "/spec/template/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb",
    ]
    anywhere = gpu_workload(labels=TAGS, selector=SPOT,  # A100 or H100 nodes: model unknown
                            annotations={"gpuwarden.io/gpu-memory": "8Gi"})
    response = post(client, "mutate", review(anywhere))
    assert response == {"uid": response["uid"], "allowed": True}


def test_mig_swap_waits_for_a_node_that_offers_the_slice(client: httpx.Client) -> None:
    on_h100 = gpu_workload(labels=TAGS, selector={**SPOT, "nvidia.com/gpu.product": H100},
                           annotations={"gpuwarden.io/gpu-memory": "8Gi"})
    validate = post(client, "validate", review(on_h100))
    assert validate["auditAnnotations"] == {"gpu-mig-for-small-jobs": "fail"}
    assert "patch" not in post(client, "mutate", review(on_h100))


def test_mirror_pods_deletions_and_pod_updates_are_not_judged(client: httpx.Client) -> None:
    mirror = gpu_workload("Pod", annotations={"kubernetes.io/config.mirror": "abc123"})
    mirror["spec"]["nodeName"] = "node-1"  # as the kubelet creates it: bound, Node-owned
    mirror["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node",
                                              "name": "node-1", "uid": "u", "controller": True}]
    deleting = gpu_workload("Deployment")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    pod = gpu_workload("Pod")
    changed_pod = copy.deepcopy(pod)
    changed_pod["metadata"]["labels"]["touched"] = "yes"
    bodies = [review(mirror), review(deleting, operation="UPDATE", old=gpu_workload()),
              review(changed_pod, operation="UPDATE", old=pod),
              review(pod, operation="DELETE"), review(pod, operation="CONNECT")]
    for body in bodies:
        for endpoint in ("validate", "mutate"):
            response = post(client, endpoint, body)
            exempt = {"auditAnnotations": {"exemption": "mirror-pod"}} if body is bodies[0] else {}
            assert response == {"uid": response["uid"], "allowed": True, **exempt}


def test_updates_are_judged_when_the_template_or_labels_change(client: httpx.Client) -> None:
    old = gpu_workload("Deployment", labels=TAGS)
    unchanged = copy.deepcopy(old)
    unchanged["metadata"]["resourceVersion"] = "42"
    unchanged["status"] = {"replicas": 1}
    quiet = post(client, "validate", review(unchanged, operation="UPDATE", old=old))
    assert quiet == {"uid": quiet["uid"], "allowed": True}  # denied if it had been judged

    new_image = copy.deepcopy(old)
    new_image["spec"]["template"]["spec"]["containers"][0]["image"] = "pytorch:25.01"
    denied = post(client, "validate", review(new_image, operation="UPDATE", old=old))
    assert denied["allowed"] is False and "[gpu-spot-required]" in denied["status"]["message"]
    patched = post(client, "mutate", review(new_image, operation="UPDATE", old=old))
    assert decoded_patch(patched)

    dropped_tags = copy.deepcopy(old)
    dropped_tags["metadata"]["labels"] = {}
    dropped_tags["spec"]["template"]["spec"]["nodeSelector"] = SPOT
    old_on_spot = copy.deepcopy(old)
    old_on_spot["spec"]["template"]["spec"]["nodeSelector"] = SPOT
    response = post(client, "validate", review(dropped_tags, operation="UPDATE", old=old_on_spot))
    assert response["allowed"] is False and "[required-cost-tags]" in response["status"]["message"]


def counted(server: RunningServer, name: str, **labels: str) -> float:
    registry = server.app.state.webhook.metrics.registry
    return float(registry.get_sample_value(name, labels) or 0.0)


def test_dry_run_gets_the_same_decision(client: httpx.Client, server: RunningServer) -> None:
    labels = {"endpoint": "validate", "decision": "deny", "dry_run": "true",
              "kind": "Deployment", "operation": "CREATE"}
    before = counted(server, "gpuwarden_admission_requests_total", **labels)
    objects = [gpu_workload(), gpu_workload(labels=TAGS, selector=SPOT),
               gpu_workload(selector={"nvidia.com/gpu.product": A100},
                            annotations={"gpuwarden.io/gpu-memory": "8Gi"})]
    for obj in objects:
        for endpoint in ("validate", "mutate"):
            real = post(client, endpoint, review(obj))
            dry = post(client, endpoint, review(obj, dry_run=True))
            real.pop("uid")
            dry.pop("uid")
            assert dry == real
    assert counted(server, "gpuwarden_admission_requests_total", **labels) - before == 2


# ---------------------------------------------------------------------------- bad input


def test_bodies_that_are_not_admission_reviews_get_400(client: httpx.Client) -> None:
    cases: list[tuple[bytes, str]] = [
        (b"{" + b" " * MAX_BODY_BYTES + b"}", "cap"),
        (b"<xml/>", "not JSON"),
        (b"[1, 2]", "got JSON array"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', "expected kind"),
        (json.dumps({**reference_reviews()["kw-review-pod-create.json"],
                     "apiVersion": "admission.k8s.io/v1beta1"}).encode(), "only admission"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
         "uid"),
    ]
    for body, expected in cases:
        for endpoint in ("validate", "mutate"):
            reply = client.post(f"/{endpoint}", content=body,
                                headers={"content-type": "application/json"})
            assert reply.status_code == 400, expected
            assert reply.json()["code"] == 400 and expected in reply.json()["message"]


def test_reviews_with_a_readable_uid_get_a_well_formed_refusal(client: httpx.Client) -> None:
    no_object = review(gpu_workload())
    no_object["request"].pop("object")
    bad_operation = review(gpu_workload(), operation="PATCH")
    for body, expected in ((no_object, "request.object is missing"),
                           (bad_operation, "request.operation")):
        response = post(client, "validate", body)
        assert response["allowed"] is False
        assert response["status"]["code"] == 400 and expected in response["status"]["message"]


def test_wrong_method_and_path_are_client_errors(client: httpx.Client) -> None:
    assert client.get("/validate").status_code == 405
    assert client.post("/elsewhere", json={}).status_code == 404


# ---------------------------------------------------------------------------- deadline


class SlowEvaluator:
    def __init__(self, engine: Engine, seconds: float):
        self.inner = PolicyEvaluator(engine)
        self.seconds = seconds
        self.calls = 0

    def __call__(self, resource: Resource, now: datetime) -> Evaluation:
        self.calls += 1
        time.sleep(self.seconds)
        return self.inner(resource, now)


def test_past_the_deadline_the_request_is_allowed_with_a_warning(
    engine: Engine, certs: Certs
) -> None:
    slow = SlowEvaluator(engine, 1.5)
    settings = WebhookSettings(timeout_seconds=0.5)  # deadline 0.4 s
    running = start_server(create_app(engine, clock=business_hours, settings=settings,
                                      evaluator=slow), certs)
    try:
        with running.client() as client:
            for path, budget in (("/validate", 0.4), ("/mutate?timeout=250ms", 0.2)):
                started = time.monotonic()
                reply = client.post(path, json=review(gpu_workload()))
                elapsed = time.monotonic() - started
                response = reply.json()["response"]
                assert reply.status_code == 200
                assert budget <= elapsed < budget + 0.6
                assert response["allowed"] is True and "patch" not in response
                assert response["warnings"] == [
                    "gpuwarden: policy evaluation passed its deadline; allowed without a verdict"]
                assert response["auditAnnotations"] == {"evaluation": "timeout"}
            metrics = reply_metrics(client)
        assert slow.calls == 2
        assert metrics[("gpuwarden_admission_requests_total", (
            ("decision", "timeout"), ("dry_run", "false"), ("endpoint", "validate"),
            ("kind", "Deployment"), ("operation", "CREATE")))] == 1
    finally:
        running.stop()


def test_go_durations_from_the_timeout_query_parameter() -> None:
    assert parse_go_duration("3s") == 3.0
    assert parse_go_duration("1500ms") == 1.5
    assert parse_go_duration("1m") == 60.0
    assert parse_go_duration("1s500ms") == 1.5
    for bad in ("", "3", "-1s", "3sx", "2h", "1m0.5s", "0s"):
        assert parse_go_duration(bad) is None
    assert WebhookSettings().deadline(None) == pytest.approx(2.4)
    assert WebhookSettings().deadline("2s") == pytest.approx(1.6)
    assert WebhookSettings().deadline("garbage") == pytest.approx(2.4)


def test_an_evaluation_error_fails_open(engine: Engine) -> None:
    def broken(resource: Resource, now: datetime) -> Evaluation:
        raise RuntimeError("bug")

    running = start_server(create_app(engine, clock=business_hours, evaluator=broken), None)
    try:
        with running.client() as client:
            reply = client.post("/validate", json=review(gpu_workload()))
            response = reply.json()["response"]
            assert reply.status_code == 200 and response["allowed"] is True
            assert response["auditAnnotations"] == {"evaluation": "error"}
    finally:
        running.stop()


# ---------------------------------------------------------------------------- TLS rotation


def peer_serial(port: int, context: ssl.SSLContext) -> int:
    with (socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
          context.wrap_socket(raw, server_hostname="127.0.0.1") as tls):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_rotated_certificate_is_served_to_new_connections(
    engine: Engine, tmp_path: Path
) -> None:
    certs = make_certs(tmp_path)
    running = start_server(create_app(engine, clock=business_hours), certs, reload_interval=0.05)
    try:
        context = certs.client_context()
        first = serial_of(certs.leaf)
        assert peer_serial(running.port, context) == first
        with running.client() as keep_alive:
            assert keep_alive.get("/healthz").text == "ok"
            later = datetime.now(UTC) + timedelta(days=400)
            rotated = certs.rotate(certs.ca.issue_cert("127.0.0.1", not_after=later))
            reloader = running.server.reloader
            assert reloader is not None
            wait_until(lambda: reloader.loads == 1)
            assert peer_serial(running.port, context) == serial_of(rotated) != first
            assert keep_alive.get("/healthz").text == "ok"  # the open connection lives on

            certs.cert.write_bytes(b"-----BEGIN CERTIFICATE-----\ntruncated\n")
            wait_until(lambda: counted(running, "gpuwarden_tls_certificate_reloads_total",
                                       result="failed") >= 1)
            assert peer_serial(running.port, context) == serial_of(rotated)
            expiry = reply_metrics(keep_alive)[
                ("gpuwarden_tls_certificate_expiry_timestamp_seconds", ())]
            assert expiry == pytest.approx(later.replace(microsecond=0).timestamp(), abs=1)
    finally:
        running.stop()


def test_plain_http_only_when_asked(engine: Engine, certs: Certs) -> None:
    with pytest.raises(ValueError, match="certificate and a key"):
        WebhookServer(create_app(engine, clock=business_hours), ServerSettings(port=0))
    running = start_server(create_app(engine, clock=business_hours), None)
    try:
        assert running.url.startswith("http://")
        with running.client() as client:
            assert client.get("/healthz").status_code == 200
    finally:
        running.stop()


# ---------------------------------------------------------------------------- health, metrics


def reply_metrics(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_decisions_latency_policies_and_cert_expiry(
    client: httpx.Client, certs: Certs
) -> None:
    def count(decision: str, kind: str = "Pod") -> float:
        key = ("gpuwarden_admission_requests_total", (
            ("decision", decision), ("dry_run", "false"), ("endpoint", "validate"),
            ("kind", kind), ("operation", "CREATE")))
        return reply_metrics(client).get(key, 0.0)

    denied_before, allowed_before = count("deny"), count("allow")
    post(client, "validate", review(gpu_workload("Pod")))
    post(client, "validate", review(gpu_workload("Pod")))
    post(client, "validate", review(gpu_workload("Pod", labels=TAGS, selector=SPOT)))
    client.post("/validate", content=b"nonsense")
    assert count("deny") - denied_before == 2
    assert count("allow") - allowed_before == 1

    samples = reply_metrics(client)
    buckets = {dict(labels)["le"]: value for (name, labels), value in samples.items()
               if name == "gpuwarden_admission_request_duration_seconds_bucket"
               and dict(labels)["endpoint"] == "validate"}
    assert "0.001" in buckets and "0.005" in buckets
    assert buckets["+Inf"] >= 4 and buckets["+Inf"] >= buckets["0.005"]
    invalid = [v for (name, labels), v in samples.items()
               if name == "gpuwarden_admission_requests_total"
               and dict(labels)["decision"] == "invalid"]
    assert sum(invalid) >= 1
    timed = {dict(labels)["policy"] for (name, labels), _ in samples.items()
             if name == "gpuwarden_policy_evaluation_seconds_count"}
    assert timed == {"gpu-spot-required", "gpu-mig-for-small-jobs", "gpu-off-hours-shutdown",
                     "required-cost-tags", "spot-checkpointing-required", "gpu-jobs-queued",
                     "untrusted-gpu-sandboxed", "shared-gpu-requires-mig"}
    not_after = x509.load_pem_x509_certificate(certs.cert.read_bytes()).not_valid_after_utc
    assert samples[("gpuwarden_tls_certificate_expiry_timestamp_seconds", ())] == (
        not_after.timestamp())
    assert samples[("gpuwarden_cluster_cache_objects", (("kind", "gpu_node"),))] == 2


class GatedLister(StaticLister):
    def __init__(self) -> None:
        super().__init__(NAMESPACES, NODES)
        self.gate = threading.Event()

    def list_namespaces(self) -> list[dict[str, Any]]:
        self.gate.wait(10)
        return super().list_namespaces()


def test_ready_only_once_the_cluster_cache_is_loaded(engine: Engine, certs: Certs) -> None:
    lister = GatedLister()
    running = start_server(create_app(engine, clock=business_hours,
                                      caches=ClusterCache(lister)), certs)
    try:
        with running.client() as client:
            assert client.get("/healthz").text == "ok"
            reply = client.get("/readyz")
            assert reply.status_code == 503 and "cache" in reply.text
            lister.gate.set()
            wait_until(lambda: client.get("/readyz").status_code == 200)
    finally:
        lister.gate.set()
        running.stop()


# ---------------------------------------------------------------------------- kubernetes client


class FakeApiServer(ThreadingHTTPServer):
    """Serves NamespaceList / NodeList JSON in chunks, as kube-apiserver does with `limit`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ApiHandler)
        self.requests: list[str] = []
        self.lists: dict[str, tuple[str, list[dict[str, Any]]]] = {
            "/api/v1/namespaces": ("NamespaceList", NAMESPACES),
            "/api/v1/nodes": ("NodeList", NODES),
        }


class _ApiHandler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def do_GET(self) -> None:
        url = urlparse(self.path)
        self.server.requests.append(self.path)
        if url.path not in self.server.lists:
            self.send_error(404)
            return
        kind, items = self.server.lists[url.path]
        query = parse_qs(url.query)
        limit = int(query.get("limit", ["500"])[0])
        start = int(query.get("continue", ["0"])[0])
        page = items[start:start + limit]
        metadata: dict[str, Any] = {"resourceVersion": "4242"}
        if start + limit < len(items):
            metadata["continue"] = str(start + limit)
        body = json.dumps({"kind": kind, "apiVersion": "v1", "metadata": metadata,
                           "items": page}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_kubernetes_client_lists_fill_the_cache_in_chunks(
    api_server: FakeApiServer, tmp_path: Path
) -> None:
    host = f"http://127.0.0.1:{api_server.server_address[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "loop", "cluster": {"server": host}}],
        "users": [{"name": "me", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "test", "context": {"cluster": "loop", "user": "me"}}],
    }))
    lister = KubernetesLister.from_environment(str(kubeconfig))
    lister.page_size = 2
    cache = ClusterCache(lister)
    assert not cache.ready
    cache.refresh()
    assert cache.ready
    assert cache.namespace_labels("prod-ml") == {"env": "prod"}
    assert cache.namespace_labels("missing") is None
    assert cache.gpu_products({}) == {A100, H100}
    assert cache.gpu_products({"pool": "a100"}) == {A100}
    assert cache.offers("nvidia.com/mig-1g.10gb", {}) is True
    assert cache.offers("nvidia.com/mig-1g.10gb", {"pool": "h100"}) is False
    snapshot = cache.snapshot
    assert snapshot is not None and {n.name for n in snapshot.nodes} == {"a100-1", "h100-1"}
    namespace_calls = [r for r in api_server.requests if r.startswith("/api/v1/namespaces")]
    assert len(namespace_calls) == 2 and "limit=2" in namespace_calls[0]
    assert "continue=2" in namespace_calls[1]


def test_a_namespace_missing_from_the_cache_triggers_an_early_refresh(engine: Engine) -> None:
    lister = StaticLister(list(NAMESPACES), NODES)
    caches = ClusterCache(lister, resync_seconds=3600)
    running = start_server(create_app(engine, clock=business_hours, caches=caches), None)
    try:
        with running.client() as client:
            wait_until(lambda: client.get("/readyz").status_code == 200)
            lister.namespaces.append({"metadata": {"name": "late", "labels": {"env": "prod"}}})
            workload = gpu_workload(namespace="late", labels=TAGS)
            first = post(client, "validate", review(workload))
            assert first["auditAnnotations"] == {"gpu-spot-required": "fail"}  # not known yet
            wait_until(lambda: "late" in caches.snapshot.namespaces,  # type: ignore[union-attr]
                       timeout=5)
            second = post(client, "validate", review(workload))
            assert second == {"uid": second["uid"], "allowed": True}
    finally:
        running.stop()


def test_cache_refresh_failures_keep_the_webhook_up(engine: Engine) -> None:
    class Down(StaticLister):
        def list_namespaces(self) -> list[dict[str, Any]]:
            raise ConnectionError("API server unreachable")

    running = start_server(create_app(engine, clock=business_hours,
                                      caches=ClusterCache(Down())), None)
    try:
        with running.client() as client:
            time.sleep(0.2)
            assert client.get("/readyz").status_code == 503
            response = post(client, "validate", review(gpu_workload()))
            assert response["allowed"] is False  # judged on the workload's own labels
    finally:
        running.stop()


# ---------------------------------------------------------------------------- CLI


def test_cli_webhook_needs_cert_and_key_unless_insecure() -> None:
    result = CliRunner().invoke(cli_app, ["webhook", "--no-cluster"])
    assert result.exit_code == 2 and "--cert and --key are required" in result.output
    result = CliRunner().invoke(cli_app, ["webhook", "--insecure-http", "--cloud", "oracle"])
    assert result.exit_code == 2 and "--cloud" in result.output


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cli_serves_admission_reviews_over_tls(certs: Certs) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "engine", "webhook", "--cert", str(certs.cert), "--key",
         str(certs.key), "--host", "127.0.0.1", "--port", str(port), "--no-cluster",
         "--cloud", "gke", "--log-level", "warning"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}",
                          verify=certs.client_context(), timeout=5) as client:
            def up() -> bool:
                assert process.poll() is None, "the webhook process exited"
                try:
                    return client.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(up, timeout=30)
            response = post(client, "mutate", review(gpu_workload("Pod", labels=TAGS)))
            assert decoded_patch(response) == [
                {"op": "add", "path": "/spec/nodeSelector",
                 "value": {"cloud.google.com/gke-spot": "true"}},
                {"op": "add", "path": "/spec/tolerations", "value": [
                    {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
                     "effect": "NoSchedule"}]},
            ]
    finally:
        process.terminate()
        output = process.communicate(timeout=10)[0].decode()
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Traceback" not in output


def test_settings_reject_unknown_clouds() -> None:
    with pytest.raises(ValueError, match="cloud"):
        AdmissionSettings(cloud="oracle")
