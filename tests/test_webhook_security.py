"""The admission webhook under hostile load, over real TLS (trustme certificates) as
tests/test_webhook.py runs it: oversized objects, slow evaluations, slow-loris connections.
Whatever arrives, an ordinary GPU workload that must be denied is still denied in time, and a
fail-closed namespace never gets an allow without a verdict."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from engine.core.catalog import MAX_REMEMBERED, Catalog, builtin_catalog
from engine.core.evaluate import Engine
from engine.core.model import Resource
from engine.loading.policies import load_policies
from engine.sources.kubernetes import gpu_model, workload_resource
from engine.webhook.admission import AdmissionSettings, Evaluation, PolicyEvaluator
from engine.webhook.app import WebhookSettings, create_app
from engine.webhook.caches import ClusterCache, StaticLister
from tests.conftest import BUSINESS_HOURS
from tests.test_webhook import (
    A100,
    NAMESPACES,
    NODES,
    REPO,
    TAGS,
    Certs,
    Clock,
    RunningServer,
    free_port,
    gpu_workload,
    make_certs,
    post,
    reply_metrics,
    review,
    start_server,
    wait_until,
)

FAIL_CLOSED = "secure-ml"
SECURE_NAMESPACES = [*NAMESPACES, {"metadata": {"name": FAIL_CLOSED, "labels": {
    "gpuwarden.io/fail-closed": "true"}}}]
TWO_MB = 2 * 1024 * 1024
DEADLINE = 2.4  # 0.8 × the default 3 s timeoutSeconds


def oversized_pod(namespace: str = FAIL_CLOSED) -> dict[str, Any]:
    """A GPU pod whose nodeSelector pins a ~2 MB `nvidia.com/gpu.product` value."""
    return gpu_workload("Pod", namespace=namespace,
                        selector={"nvidia.com/gpu.product": "NVIDIA-A100-" * (TWO_MB // 12)})


def ordinary_denied_pod(namespace: str = FAIL_CLOSED) -> dict[str, Any]:
    """On-demand, untagged: gpu-spot-required and required-cost-tags deny it."""
    return gpu_workload("Pod", namespace=namespace, selector={"nvidia.com/gpu.product": A100})


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_policies(["builtin"]))


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock(BUSINESS_HOURS)


@pytest.fixture(scope="module")
def secure_server(engine: Engine, certs: Certs, clock: Clock) -> Iterator[RunningServer]:
    caches = ClusterCache(StaticLister(SECURE_NAMESPACES, NODES), resync_seconds=3600)
    caches.refresh()
    running = start_server(create_app(engine, caches=caches, clock=clock), certs)
    yield running
    running.stop()


class SlowLoris:
    """TLS connections that send a request head a few bytes at a time, for as long as the
    server keeps them open; `closed_after` records how long each one lasted."""

    def __init__(self, running: RunningServer, connections: int, *, head: bytes = b"",
                 drip: bytes = b"X-Slow: 1\r\n", interval: float = 0.2):
        assert running.certs is not None
        self.port, self.context = running.port, running.certs.client_context()
        self.head = head or b"POST /validate HTTP/1.1\r\nHost: webhook\r\n"
        self.drip, self.interval = drip, interval
        self.stop = threading.Event()
        self.closed_after: list[float] = []
        self.threads = [threading.Thread(target=self.hold, daemon=True)
                        for _ in range(connections)]

    def hold(self) -> None:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, \
                self.context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.settimeout(self.interval)
            payload = self.head
            while not self.stop.is_set():
                try:
                    tls.sendall(payload)
                    if tls.recv(1) == b"":
                        break
                except TimeoutError:
                    payload = self.drip
                    continue
                except (OSError, ssl.SSLError):
                    break
            else:
                return
        self.closed_after.append(time.monotonic() - started)

    def __enter__(self) -> SlowLoris:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


class Flood:
    """Threads posting the same review over and over until stopped, recording each answer."""

    def __init__(self, running: RunningServer, path: str, body: dict[str, Any], threads: int):
        self.running, self.path, self.body = running, path, body
        self.stop = threading.Event()
        self.answers: list[tuple[int, dict[str, Any] | None, float]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(threads)]

    def loop(self) -> None:
        with self.running.client() as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    reply = client.post(self.path, json=self.body)
                except httpx.TransportError:
                    continue
                answer = reply.json().get("response") if reply.status_code == 200 else None
                with self.lock:
                    self.answers.append((reply.status_code, answer, time.monotonic() - started))

    def __enter__(self) -> Flood:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def test_ordinary_pods_are_denied_in_time_under_a_flood_of_oversized_reviews(
    secure_server: RunningServer,
) -> None:
    with Flood(secure_server, "/mutate", review(oversized_pod()), threads=10) as flood, \
            SlowLoris(secure_server, 20):
        time.sleep(1.0)  # let the flood fill whatever it can fill
        with secure_server.client() as client:
            for endpoint in ("validate", "mutate", "validate", "validate"):
                started = time.monotonic()
                response = post(client, endpoint, review(ordinary_denied_pod()))
                elapsed = time.monotonic() - started
                assert elapsed < DEADLINE, (endpoint, elapsed)
                assert response.get("auditAnnotations", {}).get("evaluation") is None, response
                if endpoint == "validate":
                    assert response["allowed"] is False
                    assert response["status"]["code"] == 403
                    assert "[gpu-spot-required]" in response["status"]["message"]
                else:
                    assert response["allowed"] is True and "patch" in response
    assert flood.answers, "the flood never got an answer"
    for status, answer, _ in flood.answers:
        assert status == 200 and answer is not None
        assert answer["allowed"] is False and answer["status"]["code"] == 400
        assert "63-character" in answer["status"]["message"]


# ---------------------------------------------------------------------------- object limits


Change = Callable[[dict[str, Any]], None]
POD_SPEC = ("spec", "template", "spec")


class CountingEvaluator:
    def __init__(self, engine: Engine):
        self.inner = PolicyEvaluator(engine)
        self.calls = 0

    def __call__(self, resource: Resource, now: datetime) -> Evaluation:
        self.calls += 1
        return self.inner(resource, now)


@pytest.fixture(scope="module")
def counted(engine: Engine, certs: Certs,
            clock: Clock) -> Iterator[tuple[RunningServer, CountingEvaluator]]:
    evaluator = CountingEvaluator(engine)
    running = start_server(create_app(engine, evaluator=evaluator, clock=clock), certs)
    yield running, evaluator
    running.stop()


def _set(path: tuple[str, ...], value: Any) -> Change:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return change


def _affinity(key: str, value: str, preferred: bool = False) -> Change:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
    affinity: dict[str, Any] = (
        {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term}]}
        if preferred else
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}})
    return _set((*POD_SPEC, "affinity"), {"nodeAffinity": affinity})


def _annotations(total: int) -> Change:
    half = total // 2
    return _set(("metadata", "annotations"), {"a": "x" * (half - 1), "b": "y" * (total - half - 1)})


PREFIX = "p" * 249 + ".io"  # 252 characters
LIMITS: dict[str, tuple[Change, Change, str]] = {
    # name: (change at the limit: judged, change over it: refused, words the refusal says)
    "name": (_set(("metadata", "name"), "n" * 253), _set(("metadata", "name"), "n" * 254),
             "metadata.name is 254 characters, over Kubernetes' 253-character limit"),
    "generateName": (_set(("metadata", "generateName"), "g" * 253),
                     _set(("metadata", "generateName"), "g" * 254), "metadata.generateName"),
    "namespace": (_set(("metadata", "namespace"), "s" * 63),
                  _set(("metadata", "namespace"), "s" * 64), "63-character"),
    "label value": (_set(("metadata", "labels"), {"team": "v" * 63}),
                    _set(("metadata", "labels"), {"team": "v" * 64}),
                    "metadata.labels['team'] is 64 characters, over Kubernetes' 63-character"),
    "label key name": (_set(("metadata", "labels"), {"k" * 63: "v"}),
                       _set(("metadata", "labels"), {"k" * 64: "v"}), "64-character name"),
    "label key prefix": (_set(("metadata", "labels"), {PREFIX + "p/k": "v"}),
                         _set(("metadata", "labels"), {PREFIX + "pp/k": "v"}),
                         "prefix"),
    "annotations": (_annotations(256 * 1024), _annotations(256 * 1024 + 1),
                    "262145 bytes, over Kubernetes' 262144-byte limit"),
    "template label": (_set(("spec", "template", "metadata", "labels"), {"app": "a" * 63}),
                       _set(("spec", "template", "metadata", "labels"), {"app": "a" * 64}),
                       "pod template metadata.labels"),
    "nodeSelector value": (
        _set(("spec", "template", "spec", "nodeSelector"), {"nvidia.com/gpu.product": "N" * 63}),
        _set(("spec", "template", "spec", "nodeSelector"), {"nvidia.com/gpu.product": "N" * 64}),
        "pod spec.nodeSelector['nvidia.com/gpu.product']"),
    "nodeSelector key": (
        _set(("spec", "template", "spec", "nodeSelector"), {"k" * 63: "v"}),
        _set(("spec", "template", "spec", "nodeSelector"), {"k" * 64: "v"}), "nodeSelector key"),
    "required affinity": (_affinity("nvidia.com/gpu.product", "N" * 63),
                          _affinity("nvidia.com/gpu.product", "N" * 64), "nodeAffinity"),
    "preferred affinity": (_affinity("pool", "N" * 63, preferred=True),
                           _affinity("pool", "N" * 64, preferred=True), "nodeAffinity"),
    "toleration": (_set((*POD_SPEC, "tolerations"), [{"key": "k", "value": "t" * 63}]),
                   _set((*POD_SPEC, "tolerations"), [{"key": "k", "value": "t" * 64}]),
                   "tolerations"),
    "nodeName": (_set(("spec", "template", "spec", "nodeName"), "n" * 253),
                 _set(("spec", "template", "spec", "nodeName"), "n" * 254), "nodeName"),
}


@pytest.mark.parametrize("field", sorted(LIMITS))
def test_objects_over_a_kubernetes_limit_are_refused_without_evaluation(
    counted: tuple[RunningServer, CountingEvaluator], field: str,
) -> None:
    running, evaluator = counted
    at_limit, over_limit, says = LIMITS[field]
    with running.client() as client:
        for endpoint in ("validate", "mutate"):
            judged = gpu_workload("Deployment", labels=TAGS)
            at_limit(judged)
            calls = evaluator.calls
            response = post(client, endpoint, review(judged, namespace="ml"))
            assert evaluator.calls == calls + 1, response
            assert response.get("status", {}).get("code") != 400, response

            refused = gpu_workload("Deployment", labels=TAGS)
            over_limit(refused)
            calls = evaluator.calls
            response = post(client, endpoint, review(refused, namespace="ml"))
            assert evaluator.calls == calls, "an oversized object was evaluated"
            assert response["allowed"] is False and response["status"]["code"] == 400
            message = response["status"]["message"]
            assert message.startswith("gpuwarden: invalid object, not evaluated: ")
            assert says in message and len(message) < 300
            assert response["auditAnnotations"] == {"evaluation": "invalid-object"}


def test_a_cronjob_and_a_training_job_are_measured_in_every_template(
    counted: tuple[RunningServer, CountingEvaluator],
) -> None:
    running, evaluator = counted
    cronjob = gpu_workload("CronJob", labels=TAGS)
    cronjob["spec"]["jobTemplate"]["metadata"] = {"labels": {"x": "y" * 64}}
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "t", "namespace": "ml", "labels": dict(TAGS)},
               "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {
                   "metadata": {"annotations": {"big": "z" * (257 * 1024)}},
                   "spec": {"containers": [{"name": "w", "image": "i", "resources": {
                       "limits": {"nvidia.com/gpu": 1}}}]}}}}}}
    calls = evaluator.calls
    with running.client() as client:
        for obj, says in ((cronjob, "spec.jobTemplate.metadata.labels"),
                          (pytorch, "replica template metadata.annotations")):
            response = post(client, "validate", review(obj, namespace="ml"))
            assert response["status"]["code"] == 400 and says in response["status"]["message"]
    assert evaluator.calls == calls


def test_gpu_model_matching_is_linear_and_never_remembers_input_without_bound() -> None:
    base = builtin_catalog()
    catalog = Catalog(base.instances, base.accelerators, base.mig_profiles, base.spot_discounts)
    started = time.perf_counter()
    assert gpu_model("NVIDIA-A100-" * (TWO_MB // 12), catalog)[1] is None
    assert time.perf_counter() - started < 0.05  # was 4-7 s: a regex per word per model
    pod = oversized_pod()
    started = time.perf_counter()
    resource = workload_resource(pod, catalog=catalog)
    assert time.perf_counter() - started < 0.5
    assert resource is not None and resource.gpu is not None and resource.gpu.model is None
    assert gpu_model(A100, catalog) == ("NVIDIA A100 80GB SXM", 80.0)
    for number in range(MAX_REMEMBERED + 500):
        gpu_model(f"NVIDIA-X{number}-80GB", catalog)
    assert len(catalog._by_model) == MAX_REMEMBERED
    assert gpu_model(A100, catalog) == ("NVIDIA A100 80GB SXM", 80.0)  # recomputed, same


# ---------------------------------------------------------------------------- bounded pool


class GatedEvaluator:
    """Blocks its first call until `gate` is set; the others run at once."""

    def __init__(self, engine: Engine):
        self.inner = PolicyEvaluator(engine)
        self.gate = threading.Event()
        self.calls = 0

    def __call__(self, resource: Resource, now: datetime) -> Evaluation:
        self.calls += 1
        if self.calls == 1:
            self.gate.wait(20)
        return self.inner(resource, now)


def in_flight(client: httpx.Client) -> float:
    return reply_metrics(client)[("gpuwarden_admission_evaluations_in_flight", ())]


def test_a_full_pool_answers_at_once_and_holds_abandoned_work_until_it_ends(
    engine: Engine, certs: Certs, clock: Clock,
) -> None:
    evaluator = GatedEvaluator(engine)
    caches = ClusterCache(StaticLister(SECURE_NAMESPACES, NODES))
    settings = WebhookSettings(timeout_seconds=0.5, workers=1, max_in_flight=1)  # 0.4 s deadline
    running = start_server(create_app(engine, settings=settings, caches=caches,
                                      evaluator=evaluator, clock=clock), certs)
    try:
        with running.client() as client:
            response = post(client, "validate", review(ordinary_denied_pod("ml")))
            assert response["auditAnnotations"] == {"evaluation": "timeout"}
            assert in_flight(client) == 1  # past its deadline, still running, still counted
            cases = [("validate", "ml", True), ("mutate", "ml", True),
                     ("validate", FAIL_CLOSED, False), ("validate/fail-closed", "ml", False),
                     ("mutate/fail-closed", "ml", False)]
            for endpoint, namespace, allowed in cases:
                started = time.monotonic()
                response = post(client, endpoint, review(ordinary_denied_pod(namespace)))
                assert time.monotonic() - started < 0.3, "a full pool must answer at once"
                assert response["allowed"] is allowed, (endpoint, namespace)
                assert response["auditAnnotations"] == {"evaluation": "busy"}
                if allowed:
                    assert response["warnings"] == [
                        "gpuwarden: too many evaluations in flight; allowed without a verdict"]
                else:
                    assert response["status"]["code"] == 503
                    assert "fails closed" in response["status"]["message"]
            assert evaluator.calls == 1
            evaluator.gate.set()
            wait_until(lambda: in_flight(client) == 0)
            response = post(client, "validate", review(ordinary_denied_pod(FAIL_CLOSED)))
            assert response["allowed"] is False and response["status"]["code"] == 403
            samples = reply_metrics(client)
        assert samples[("gpuwarden_admission_requests_total", (
            ("decision", "busy-deny"), ("dry_run", "false"), ("endpoint", "validate"),
            ("kind", "Pod"), ("operation", "CREATE")))] == 2
    finally:
        evaluator.gate.set()
        running.stop()


def test_fail_closed_namespaces_never_get_an_allow_without_a_verdict(
    engine: Engine, certs: Certs, clock: Clock,
) -> None:
    release = threading.Event()

    def blocked(resource: Resource, now: datetime) -> Evaluation:
        release.wait(20)
        raise AssertionError("released only after the test")

    def broken(resource: Resource, now: datetime) -> Evaluation:
        raise RuntimeError("bug")

    caches = ClusterCache(StaticLister(SECURE_NAMESPACES, NODES))
    settings = WebhookSettings(timeout_seconds=0.5)
    for evaluator, label in ((blocked, "timeout"), (broken, "error")):
        running = start_server(create_app(engine, settings=settings, caches=caches,
                                          evaluator=evaluator, clock=clock), certs)
        try:
            with running.client() as client:
                for endpoint, namespace in (("validate", FAIL_CLOSED), ("mutate", FAIL_CLOSED),
                                            ("validate/fail-closed", "ml"),
                                            ("mutate/fail-closed", "default")):
                    response = post(client, endpoint, review(ordinary_denied_pod(namespace)))
                    assert response["allowed"] is False, (label, endpoint, namespace)
                    assert response["status"]["code"] == 503 and "patch" not in response
                    assert response["auditAnnotations"] == {"evaluation": label}
                response = post(client, "validate", review(ordinary_denied_pod("ml")))
                assert response["allowed"] is True
                assert response["auditAnnotations"] == {"evaluation": label}
        finally:
            release.set()
            running.stop()


# ---------------------------------------------------------------------------- exemptions


def mirror_pod(**changes: Any) -> dict[str, Any]:
    pod = gpu_workload("Pod", namespace="ml",
                       annotations={"kubernetes.io/config.mirror": "abc123"})
    pod["spec"]["nodeName"] = "node-1"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "node-1",
                                           "uid": "u", "controller": True}]
    for key, value in changes.items():
        if key == "owner":
            pod["metadata"]["ownerReferences"][0].update(value)
        elif value is None:
            pod["spec"].pop(key, None)
        else:
            pod["spec"][key] = value
    return pod


def test_the_mirror_annotation_alone_exempts_nothing(
    secure_server: RunningServer,
) -> None:
    deployment = gpu_workload("Deployment", namespace="ml",
                              annotations={"kubernetes.io/config.mirror": "abc123"})
    deployment["spec"]["template"]["spec"]["nodeName"] = "node-1"
    no_owner = mirror_pod()
    no_owner["metadata"].pop("ownerReferences")
    fakes = [mirror_pod(nodeName=None), no_owner, mirror_pod(owner={"kind": "ReplicaSet"}),
             mirror_pod(owner={"name": "node-2"}), deployment]
    with secure_server.client() as client:
        for fake in fakes:
            for endpoint in ("validate", "mutate"):
                response = post(client, endpoint, review(fake))
                assert "exemption" not in response.get("auditAnnotations", {}), fake
                if endpoint == "validate":
                    assert response["allowed"] is False and response["status"]["code"] == 403
        for endpoint in ("validate", "mutate"):
            response = post(client, endpoint, review(mirror_pod()))
            assert response == {"uid": response["uid"], "allowed": True,
                                "auditAnnotations": {"exemption": "mirror-pod"}}


def test_every_exemption_is_in_the_audit_annotations(
    engine: Engine, certs: Certs, clock: Clock,
) -> None:
    settings = WebhookSettings(AdmissionSettings(excluded_namespaces=frozenset({"batch"})))
    running = start_server(create_app(engine, settings=settings, clock=clock), certs)
    try:
        with running.client() as client:
            for endpoint in ("validate", "mutate"):
                excluded = post(client, endpoint, review(ordinary_denied_pod("batch")))
                assert excluded == {"uid": excluded["uid"], "allowed": True, "auditAnnotations": {
                    "exemption": "excluded-namespace:batch"}}
                labelled = gpu_workload("Pod", namespace="ml", labels={
                    "gpuwarden.io/exempt": "required-cost-tags"})
                response = post(client, endpoint, review(labelled))
                assert response["auditAnnotations"]["exemption"] == "exempt:required-cost-tags"
                everything = gpu_workload("Pod", namespace="ml", annotations={
                    "gpuwarden.io/exempt": "all " + "x" * 400})
                response = post(client, endpoint, review(everything))
                assert response["allowed"] is True
                exemption = response["auditAnnotations"]["exemption"]
                assert exemption.startswith("exempt:all,") and len(exemption) == 256
    finally:
        running.stop()


# ---------------------------------------------------------------------------- connections


def test_slow_and_silent_connections_are_dropped(engine: Engine, certs: Certs) -> None:
    running = start_server(create_app(engine), certs, request_read_seconds=1.0)
    try:
        silent = SlowLoris(running, 2, head=b"P", drip=b"", interval=0.3)
        dripping = SlowLoris(running, 2)
        slow_body = SlowLoris(running, 2, head=b"POST /validate HTTP/1.1\r\nHost: w\r\n"
                              b"Content-Length: 100000\r\n\r\n{", drip=b" ")
        with silent, dripping, slow_body:
            wait_until(lambda: len(silent.closed_after) + len(dripping.closed_after)
                       + len(slow_body.closed_after) == 6, timeout=5)
        for lasted in silent.closed_after + dripping.closed_after + slow_body.closed_after:
            assert 0.9 < lasted < 2.5
        with running.client() as client:  # a request that arrives whole is not cut short
            assert post(client, "validate", review(gpu_workload()))["allowed"] is False
    finally:
        running.stop()


def test_past_the_connection_limit_requests_get_503_until_idle_ones_are_dropped(
    engine: Engine, certs: Certs,
) -> None:
    running = start_server(create_app(engine), certs, limit_concurrency=4,
                           request_read_seconds=1.0)
    idle: list[ssl.SSLSocket] = []
    try:
        context = certs.client_context()
        for _ in range(4):
            raw = socket.create_connection(("127.0.0.1", running.port), timeout=5)
            idle.append(context.wrap_socket(raw, server_hostname="127.0.0.1"))
        with running.client() as client:
            assert client.get("/healthz").status_code == 503
        time.sleep(1.5)
        with running.client() as client:
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in idle:
            sock.close()
        running.stop()


def test_oversized_heads_and_bodies_are_refused_before_parsing(
    secure_server: RunningServer,
) -> None:
    with secure_server.client() as client:
        reply = client.post("/validate", json={}, headers={"x-big": "h" * (17 * 1024)})
        assert reply.status_code == 400
    with secure_server.client() as client:

        def chunks() -> Iterator[bytes]:
            for _ in range(4):
                yield b"[" * (1024 * 1024)

        reply = client.post("/validate", content=chunks())  # chunked: no Content-Length
        assert reply.status_code == 400 and "cap" in reply.json()["message"]


# ---------------------------------------------------------------------------- client certificates


@pytest.fixture(scope="module")
def mutual(engine: Engine, certs: Certs, tmp_path_factory: pytest.TempPathFactory,
           clock: Clock) -> Iterator[tuple[RunningServer, trustme.CA]]:
    client_ca = trustme.CA()
    ca_file = tmp_path_factory.mktemp("client-ca") / "ca.crt"
    client_ca.cert_pem.write_to_path(str(ca_file))
    running = start_server(create_app(engine, clock=clock), certs, client_ca=ca_file)
    yield running, client_ca
    running.stop()


def client_with(running: RunningServer, identity: trustme.CA | None) -> httpx.Client:
    assert running.certs is not None
    context = running.certs.client_context()
    if identity is not None:
        identity.issue_cert("kube-apiserver").configure_cert(context)
    return httpx.Client(base_url=running.url, verify=context, timeout=10)


def test_admission_calls_need_a_client_certificate_from_the_ca(
    mutual: tuple[RunningServer, trustme.CA],
) -> None:
    running, client_ca = mutual
    with client_with(running, None) as anonymous:
        assert anonymous.get("/healthz").status_code == 200  # the kubelet's probes
        assert anonymous.get("/metrics").status_code == 200
        for path in ("/validate", "/mutate", "/validate/fail-closed"):
            reply = anonymous.post(path, json=review(gpu_workload()))
            assert reply.status_code == 403 and "client certificate" in reply.text
    with client_with(running, client_ca) as api_server:
        assert post(api_server, "validate", review(gpu_workload()))["allowed"] is False
    with client_with(running, trustme.CA()) as stranger, pytest.raises(httpx.TransportError):
        stranger.post("/validate", json=review(gpu_workload()))


def test_cli_client_ca_option(certs: Certs, tmp_path: Path) -> None:
    base = [sys.executable, "-m", "engine", "webhook", "--host", "127.0.0.1", "--no-cluster",
            "--log-level", "warning"]
    tls = ["--cert", str(certs.cert), "--key", str(certs.key)]
    for extra, says in ((["--client-ca", str(tmp_path / "missing.pem"), *tls], "missing.pem"),
                        (["--client-ca", str(certs.cert), "--insecure-http"], "needs TLS")):
        done = subprocess.run([*base, "--port", str(free_port()), *extra], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1

    client_ca = trustme.CA()
    ca_file = tmp_path / "ca.crt"
    client_ca.cert_pem.write_to_path(str(ca_file))
    port = free_port()
    process = subprocess.Popen([*base, "--port", str(port), *tls, "--client-ca", str(ca_file)],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        context = certs.client_context()
        client_ca.issue_cert("kube-apiserver").configure_cert(context)
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context,
                          timeout=5) as client:
            def up() -> bool:
                assert process.poll() is None, "the webhook process exited"
                try:
                    return client.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(up, timeout=30)
            assert post(client, "validate", review(gpu_workload()))["allowed"] is False
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=certs.client_context(),
                          timeout=5) as anonymous:
            assert anonymous.post("/validate", json=review(gpu_workload())).status_code == 403
    finally:
        process.terminate()
        process.communicate(timeout=10)


# ---------------------------------------------------------------------------- terraform module


def terraform_module() -> dict[str, list[Any]]:
    pytest.importorskip("hcl2")
    from tests.test_terraform_modules import MODULE, parse

    merged: dict[str, list[Any]] = {}
    for path in sorted(MODULE.glob("*.tf")):
        for key, blocks in parse(path).items():
            merged.setdefault(key, []).extend(blocks)
    return merged


def test_terraform_network_policy_admits_only_the_api_server() -> None:
    module = terraform_module()
    (policy,) = [body["kubernetes_network_policy_v1"]["this"] for body in module["resource"]
                 if "kubernetes_network_policy_v1" in body]
    assert policy["count"] == "${var.network_policy_enabled ? 1 : 0}"
    spec = policy["spec"][0]
    assert spec["pod_selector"][0]["match_labels"] == "${local.selector}"
    assert spec["policy_types"] == ["Ingress"]
    (ingress,) = spec["ingress"]
    (port,) = ingress["ports"]
    assert (port["port"], port["protocol"]) == ("${tostring(local.container_port)}", "TCP")
    sources = {next(iter(d["from"]["content"][0].keys() - {"__is_block__"})): d["from"]["for_each"]
               for d in ingress["dynamic"]}
    assert sources["ip_block"] == "${var.api_server_cidrs}"
    assert "var.api_server_namespace_labels" in sources["namespace_selector"]
    condition = policy["lifecycle"][0]["precondition"][0]["condition"]
    assert "var.api_server_cidrs" in condition and "var.api_server_namespace_labels" in condition
    variables = {name: body for block in module["variable"] for name, body in block.items()}
    for name in ("network_policy_enabled", "api_server_cidrs", "api_server_namespace_labels",
                 "client_ca_secret"):
        assert len(variables[name]["description"]) > 40, name
    assert variables["network_policy_enabled"]["default"] is True
    assert variables["api_server_cidrs"]["default"] == []
    assert "cidrhost" in variables["api_server_cidrs"]["validation"][0]["condition"]


def test_terraform_client_ca_is_mounted_and_passed_when_set() -> None:
    module = terraform_module()
    (deployment,) = [body["kubernetes_deployment_v1"]["this"] for body in module["resource"]
                     if "kubernetes_deployment_v1" in body]
    pod = deployment["spec"][0]["template"][0]["spec"][0]
    args = pod["container"][0]["args"]
    assert 'var.client_ca_secret != "" ? ["--client-ca", "${local.client_ca_dir}/ca.crt"]' in args
    volumes = [d["volume"] for d in pod["dynamic"] if "volume" in d]
    (client_ca,) = [v for v in volumes if v["content"][0]["name"] == "client-ca"]
    assert client_ca["for_each"] == '${var.client_ca_secret != "" ? [var.client_ca_secret] : []}'
