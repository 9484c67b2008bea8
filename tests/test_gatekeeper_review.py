"""At the webhook, Rego admission policies (Gatekeeper templates) read the API server's own
request as `input.review`: its operation, userInfo and oldObject, with the object as judged;
an expanded Pod (a controller's template) gets a review synthesized for it, as Gatekeeper's
expansion does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine.core.evaluate import Engine
from engine.loading.policies import load_policies
from engine.webhook.app import create_app
from engine.webhook.caches import ClusterCache, StaticLister
from tests.test_webhook import NAMESPACES, NODES, post, review, start_server, wait_until

pytest.importorskip("regorus")

MODULE = '''package who

violation[{"msg": msg}] {
  input.review.userInfo.username == "mallory"
  msg := sprintf("%v by %v (old replicas %v)", [input.review.operation,
    input.review.userInfo.username, object.get(input.review, ["oldObject", "spec", "replicas"],
    "none")])
}
'''


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base: Path = tmp_path_factory.mktemp("who")
    (base / "who.rego").write_text(MODULE)
    (base / "who.yaml").write_text(yaml.safe_dump({"apiVersion": "gpuwarden.io/v1", "policies": [{
        "id": "no-mallory", "title": "no mallory", "severity": "high",
        "resources": ["workload", "other"],
        "rego": {"module": "who.rego", "input": "admission",
                 "match": {"kinds": [{"apiGroups": ["*"], "kinds": ["*"]}]}},
        "enforcement": {"plan": "off", "admission": "deny", "runtime": "off"}}]}))
    caches = ClusterCache(StaticLister(NAMESPACES, NODES), resync_seconds=3600)
    running = start_server(create_app(Engine(load_policies([str(base)])), caches=caches), None)
    with running.client() as client:
        wait_until(lambda: client.get("/readyz").status_code == 200)
        yield client
    running.stop()


def _service(replicas: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "ml"}, "spec": spec}


def _as(body: dict[str, Any], username: str) -> dict[str, Any]:
    body["request"]["userInfo"] = {"username": username, "groups": ["dev"]}
    return body


def test_the_review_carries_the_api_server_s_user_and_operation(webhook: Any) -> None:
    denied = post(webhook, "validate", _as(review(_service()), "mallory"))
    assert denied["allowed"] is False
    assert "CREATE by mallory (old replicas none)" in denied["status"]["message"]
    assert post(webhook, "validate", _as(review(_service()), "alice"))["allowed"] is True


def test_an_update_carries_its_old_object(webhook: Any) -> None:
    body = _as(review(_service(2), operation="UPDATE", old=_service(1)), "mallory")
    denied = post(webhook, "validate", body)
    assert denied["allowed"] is False
    assert "UPDATE by mallory (old replicas 1)" in denied["status"]["message"]
