"""The webhook's inventory: Gatekeeper's `data.inventory` for Rego policies that declare kinds,
and the DRA claims pods name, listed through the official `kubernetes` client from a loopback
HTTP server that answers discovery and chunked lists as kube-apiserver does."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson
import pytest
import yaml

from engine.core.evaluate import Engine
from engine.loading.policies import load_policies
from engine.webhook.admission import AdmissionSettings, Judge, PolicyEvaluator
from engine.webhook.app import create_app
from engine.webhook.caches import ClusterCache, KubernetesLister
from engine.webhook.inventory import Gvk, read_inventory
from engine.webhook.review import parse_review
from tests.conftest import BUSINESS_HOURS
from tests.test_webhook import (
    NODES,
    TAGS,
    FakeApiServer,
    _ApiHandler,
    post,
    review,
    start_server,
    wait_until,
)

REPO = Path(__file__).resolve().parents[1]
INGRESS_SAMPLES = REPO / "tests/data/gatekeeper/uniqueingresshost/samples/unique-ingress-host"
INGRESS = Gvk("networking.k8s.io", "v1", "Ingress")
NAMESPACE = Gvk("", "v1", "Namespace")

DISCOVERY = {
    "/api/v1": [("namespaces", "Namespace", False), ("namespaces/status", "Namespace", False),
                ("nodes", "Node", False), ("services", "Service", True)],
    "/apis/networking.k8s.io/v1": [("ingresses", "Ingress", True),
                                   ("ingresses/status", "Ingress", True)],
    "/apis/resource.k8s.io/v1": [("resourceclaims", "ResourceClaim", True),
                                 ("resourceclaimtemplates", "ResourceClaimTemplate", True)],
}


def _as_listed(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a list's item: no apiVersion and kind, managedFields kept."""
    item = {k: v for k, v in copy.deepcopy(obj).items() if k not in ("apiVersion", "kind")}
    item["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    return item


def _existing_ingress() -> dict[str, Any]:
    return _as_listed(yaml.safe_load(
        (INGRESS_SAMPLES / "example_inventory_disallowed.yaml").read_text()))


def _claim_template(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return _as_listed({"metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}})


class ApiServer(FakeApiServer):
    """`tests.test_webhook.FakeApiServer` plus discovery (APIResourceList) and more lists."""

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _DiscoveryHandler
        self.lists.update({
            "/api/v1/services": ("ServiceList", []),
            "/apis/networking.k8s.io/v1/ingresses": ("IngressList", [_existing_ingress()]),
            "/apis/resource.k8s.io/v1/resourceclaims": ("ResourceClaimList", []),
            "/apis/resource.k8s.io/v1/resourceclaimtemplates": (
                "ResourceClaimTemplateList", [_claim_template("two-gpus", "ml", 2)]),
        })


class _DiscoveryHandler(_ApiHandler):
    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path not in DISCOVERY:
            super().do_GET()
            return
        self.server.requests.append(self.path)
        body = json.dumps({"kind": "APIResourceList", "groupVersion": path.split("/", 2)[2],
                           "resources": [{"name": name, "kind": kind, "namespaced": namespaced,
                                          "verbs": ["list"]}
                                         for name, kind, namespaced in DISCOVERY[path]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    server = ApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def lister_for(server: ApiServer, tmp_path: Path) -> KubernetesLister:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "loop", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "me", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "test", "context": {"cluster": "loop", "user": "me"}}],
    }))
    return KubernetesLister.from_environment(str(kubeconfig))


# ---------------------------------------------------------------------------- the cache


def test_the_inventory_has_gatekeeper_s_shape(api_server: ApiServer, tmp_path: Path) -> None:
    lister = lister_for(api_server, tmp_path)
    lister.page_size = 1  # every list in chunks
    cache = ClusterCache(lister)
    cache.inventory_kinds = {INGRESS, NAMESPACE}
    cache.refresh()
    assert cache.snapshot is not None
    document = cache.snapshot.inventory.document([INGRESS, NAMESPACE])
    ingress = document["namespace"]["default"]["networking.k8s.io/v1"]["Ingress"][
        "ingress-host-example"]
    assert ingress["apiVersion"] == "networking.k8s.io/v1" and ingress["kind"] == "Ingress"
    assert "managedFields" not in ingress["metadata"]
    assert ingress["spec"]["rules"][0]["host"] == "example-host.example.com"
    assert sorted(document["cluster"]["v1"]["Namespace"]) == ["default", "ml", "prod-ml"]
    assert set(document) == {"cluster", "namespace"} and list(document["namespace"]) == ["default"]
    # Only the kinds a policy asks for: the Ingress-only view has no Namespaces.
    assert cache.snapshot.inventory.document([INGRESS])["cluster"] == {}
    # Namespaces listed twice (labels, inventory), each in three chunks of one.
    chunks = [r for r in api_server.requests if r.startswith("/api/v1/namespaces?")]
    assert len(chunks) == 6 and sum("continue=" in r for r in chunks) == 4
    assert cache.claims() == {("ResourceClaimTemplate", "ml", "two-gpus"):
                              cache.claims()[("ResourceClaimTemplate", "ml", "two-gpus")]}
    assert cache.claims()[("ResourceClaimTemplate", "ml", "two-gpus")].gpus == 2


def test_a_kind_not_served_is_empty_and_a_failed_list_is_a_gap(api_server: ApiServer,
                                                               tmp_path: Path) -> None:
    lister = lister_for(api_server, tmp_path)
    old_ingress, widget = Gvk("extensions", "v1beta1", "Ingress"), Gvk("", "v1", "Widget")
    inventory = read_inventory(lister, [INGRESS, old_ingress, widget])
    assert inventory.gap([INGRESS, old_ingress, widget]) is None
    assert inventory.document([old_ingress, widget]) == {"cluster": {}, "namespace": {}}
    # Discovery names services, but listing them fails (the server answers 404 to the list).
    del api_server.lists["/api/v1/services"]
    failed = read_inventory(lister, [Gvk("", "v1", "Service"), INGRESS])
    gap = failed.gap([Gvk("", "v1", "Service"), INGRESS])
    assert gap is not None and gap.startswith("v1 Service (listing failed")
    assert failed.gap([INGRESS]) is None


def test_the_inventory_is_bounded_by_objects_and_bytes(api_server: ApiServer,
                                                       tmp_path: Path) -> None:
    lister = lister_for(api_server, tmp_path)
    api_server.lists["/api/v1/services"] = ("ServiceList", [
        _as_listed({"metadata": {"name": f"svc-{i}", "namespace": "default"},
                    "spec": {"selector": {"app": "x" * 100}}}) for i in range(50)])
    services = Gvk("", "v1", "Service")
    by_objects = read_inventory(lister, [services, INGRESS], max_objects=10)
    assert services not in by_objects.kinds and INGRESS in by_objects.kinds
    assert "past the inventory's bounds" in str(by_objects.gap([services]))
    by_bytes = read_inventory(lister, [services], max_bytes=2_000)
    assert services not in by_bytes.kinds
    assert set(read_inventory(lister, [services]).kinds) == {services}


# ---------------------------------------------------------------------------- at the webhook


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from engine.cli import main; sys.argv[0] = 'gpuwarden'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def _ingress_review(name: str) -> dict[str, Any]:
    obj = yaml.safe_load((INGRESS_SAMPLES / name).read_text())
    body = review(obj)
    for key in ("kind", "requestKind"):
        body["request"][key] = {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"}
    return body


@pytest.fixture
def ingress_webhook(api_server: ApiServer, tmp_path: Path) -> Iterator[tuple[Any, ClusterCache]]:
    base = REPO / "tests/data/gatekeeper/uniqueingresshost"
    out = tmp_path / "policies"
    done = _cli("policies", "import-gatekeeper", str(base / "template.yaml"),
                str(INGRESS_SAMPLES / "constraint.yaml"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((out / "k8suniqueingresshost.yaml").read_text())
    assert {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"} in \
        written["policies"][0]["rego"]["inventory"]
    caches = ClusterCache(lister_for(api_server, tmp_path), resync_seconds=3600)
    running = start_server(create_app(Engine(load_policies([str(out)])), caches=caches), None)
    with running.client() as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client, caches
    running.stop()


def test_a_host_an_existing_ingress_has_is_denied(
        ingress_webhook: tuple[Any, ClusterCache], api_server: ApiServer) -> None:
    client, caches = ingress_webhook
    denied = post(client, "validate", _ingress_review("example_disallowed.yaml"))
    assert denied["allowed"] is False
    assert "ingress host conflicts with an existing ingress <example-host.example.com>" in \
        denied["status"]["message"]
    assert post(client, "validate", _ingress_review("example_allowed.yaml"))["allowed"] is True
    # The existing ingress itself (an update of it) conflicts with nothing.
    same = _ingress_review("example_inventory_disallowed.yaml")
    assert post(client, "validate", same)["allowed"] is True
    # The inventory follows the cluster: once that ingress is gone, the host is free.
    api_server.lists["/apis/networking.k8s.io/v1/ingresses"] = ("IngressList", [])
    caches.refresh()
    assert post(client, "validate", _ingress_review("example_disallowed.yaml"))["allowed"] is True


def test_the_metrics_count_inventory_objects_and_dra_claims(
        ingress_webhook: tuple[Any, ClusterCache]) -> None:
    client, _ = ingress_webhook
    text = client.get("/metrics").text
    assert 'gpuwarden_cluster_cache_objects{kind="inventory"} 1.0' in text
    assert 'gpuwarden_cluster_cache_objects{kind="dra_claim"} 1.0' in text


def test_an_inventory_past_its_bounds_gives_no_verdict(
        ingress_webhook: tuple[Any, ClusterCache]) -> None:
    client, caches = ingress_webhook
    caches.max_inventory_objects = 0
    caches.refresh()
    answer = post(client, "validate", _ingress_review("example_disallowed.yaml"))
    # failure_policy Ignore: allowed, but never as a pass: an unknown finding and a warning.
    assert answer["allowed"] is True
    assert answer["auditAnnotations"] == {"unique-ingress-host": "unknown"}
    assert "data.inventory is incomplete" in " ".join(answer.get("warnings", []))


def test_without_a_cluster_an_inventory_policy_gives_no_verdict(tmp_path: Path) -> None:
    out = tmp_path / "policies"
    base = REPO / "tests/data/gatekeeper/uniqueingresshost"
    done = _cli("policies", "import-gatekeeper", str(base / "template.yaml"),
                str(INGRESS_SAMPLES / "constraint.yaml"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    running = start_server(create_app(Engine(load_policies([str(out)])),
                                      caches=ClusterCache(None)), None)
    try:
        with running.client() as client:
            answer = post(client, "validate", _ingress_review("example_disallowed.yaml"))
    finally:
        running.stop()
    assert answer["allowed"] is True
    assert answer["auditAnnotations"] == {"unique-ingress-host": "unknown"}


# ---------------------------------------------------------------------------- DRA claims


def _claiming_pod(template: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "claimer", "namespace": "ml", "labels": dict(TAGS),
                         "annotations": {"gpuwarden.io/checkpoint": "s3://ckpt/claimer"}},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}


@pytest.fixture
def builtin_webhook(api_server: ApiServer, tmp_path: Path) -> Iterator[Any]:
    caches = ClusterCache(lister_for(api_server, tmp_path), resync_seconds=3600)
    running = start_server(create_app(Engine(load_policies(["builtin"])), caches=caches), None)
    with running.client() as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client
    running.stop()


def test_a_pod_s_dra_claim_template_in_the_cache_counts_its_gpus(builtin_webhook: Any) -> None:
    denied = post(builtin_webhook, "validate", review(_claiming_pod("two-gpus")))
    assert denied["allowed"] is False
    assert "[gpu-spot-required] claimer runs 2 GPU" in denied["status"]["message"]


def test_a_claim_missing_from_the_cache_is_unknown_and_named(builtin_webhook: Any) -> None:
    answer = post(builtin_webhook, "validate", review(_claiming_pod("not-there")))
    assert answer["allowed"] is True  # undecidable: never a denial, never a silent pass
    assert answer["auditAnnotations"]["gpu-spot-required"] == "unknown"
    assert any(w.startswith("[gpu-spot-required]") for w in answer["warnings"])


def test_the_unknown_finding_names_the_missing_claim(api_server: ApiServer,
                                                     tmp_path: Path) -> None:
    engine = Engine(load_policies(["builtin"]))
    caches = ClusterCache(lister_for(api_server, tmp_path))
    caches.refresh()
    judge = Judge(PolicyEvaluator(engine), caches, AdmissionSettings(), help_by_policy={},
                  catalog=engine.catalog)
    request = parse_review(orjson.dumps(review(_claiming_pod("not-there"))))
    outcome = judge.validate(request, BUSINESS_HOURS)
    assert outcome.evaluation is not None
    [spot] = [f for f in outcome.evaluation.findings if f.policy == "gpu-spot-required"]
    assert spot.result == "unknown"
    assert "DRA claim(s) it names were not found (ResourceClaimTemplate ml/not-there)" in \
        spot.message
    found = judge.validate(parse_review(orjson.dumps(review(_claiming_pod("two-gpus")))),
                           BUSINESS_HOURS)
    assert found.evaluation is not None
    assert [f.result for f in found.evaluation.findings if f.policy == "gpu-spot-required"] == \
        ["fail"]


def test_nodes_and_namespaces_still_list(api_server: ApiServer, tmp_path: Path) -> None:
    cache = ClusterCache(lister_for(api_server, tmp_path))
    cache.refresh()
    assert cache.namespace_labels("prod-ml") == {"env": "prod"}
    assert cache.snapshot is not None and len(cache.snapshot.nodes) == len(NODES) - 1


def test_hostile_objects_are_skipped_or_filed_safely() -> None:
    from engine.webhook.caches import StaticLister

    services = Gvk("", "v1", "Service")
    items: list[Any] = [
        "not an object", {"metadata": None}, {"metadata": {"name": 7}}, {"spec": {}},
        {"metadata": {"name": "odd-ns", "namespace": {"not": "a string"}}},
        {"metadata": {"name": "ok", "namespace": "ml", "managedFields": [{"x": 1}]}},
    ]
    inventory = read_inventory(StaticLister(objects={services: (True, items)}), [services],
                               dra_claims=False)
    document = inventory.document([services])
    assert sorted(document["namespace"]) == ["default", "ml"]
    assert list(document["namespace"]["ml"]["v1"]["Service"]) == ["ok"]
    assert orjson.dumps(document)  # a JSON document, whatever the objects held
    assert inventory.objects == 2 and inventory.gap([services]) is None
