"""Fuzz /validate and /mutate (in-process ASGI, hypothesis) with malformed bodies, mutated
reviews and hostile sizes: never a 5xx or an exception; a 200 is always a well-formed
AdmissionReview for the request's uid, and a patch always applies to the object it was computed
for; an object over a Kubernetes size limit is refused at once, never evaluated.

Examples per test: GPUWARDEN_FUZZ_EXAMPLES (default 60; e.g. 2000 for a long run)."""

from __future__ import annotations

import base64
import copy
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.evaluate import Engine
from engine.loading.policies import load_policies
from engine.webhook.app import create_app
from engine.webhook.caches import ClusterCache, StaticLister
from engine.webhook.review import MAX_BODY_BYTES
from tests.conftest import OFF_HOURS
from tests.test_webhook import (
    A100,
    NAMESPACES,
    NODES,
    SPOT,
    TAGS,
    Clock,
    InProcessClient,
    gpu_workload,
    reference_objects,
    reference_reviews,
    review,
)

EXAMPLES = int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def client() -> Iterator[InProcessClient]:
    caches = ClusterCache(StaticLister(NAMESPACES, NODES))
    caches.refresh()
    app = create_app(Engine(load_policies(["builtin"])), caches=caches, clock=Clock(OFF_HOURS))
    with InProcessClient(app) as in_process:
        yield in_process


def seed_reviews() -> list[dict[str, Any]]:
    seeds = list(reference_reviews().values())
    seeds += [review(obj) for obj in reference_objects()]
    seeds += [
        review(gpu_workload(kind, labels=TAGS, selector={"nvidia.com/gpu.product": A100},
                            annotations={"gpuwarden.io/gpu-memory": "8Gi"}))
        for kind in ("Pod", "Deployment", "Job", "CronJob")
    ]
    seeds.append(review(gpu_workload(selector=SPOT), operation="UPDATE",
                        old=gpu_workload()))
    return seeds


SEEDS = seed_reviews()

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["1", "0", "-1", "1e3", "500m", "nvidia.com/gpu", "CREATE", "UPDATE",
                     "Pod", "spot", "NVIDIA-A100-SXM4-80GB", "8Gi", "", "\x00", "é" * 3]),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def mutate(document: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    """The document with the node at `path` replaced, deleted, or given a new member."""
    if not path:
        return value if action != "add" else document
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent[last], dict):
        parent[last]["fuzz"] = value
    elif action == "add" and isinstance(parent[last], list):
        parent[last].append(value)
    else:
        parent[last] = value
    return document


@st.composite
def mutated_reviews(draw: st.DrawFn) -> dict[str, Any]:
    document = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        candidates = list(paths(document))
        path = draw(st.sampled_from(candidates))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and not path:
            action = "replace"
        document = mutate(document, path, action, draw(json_values))
    return document  # type: ignore[no-any-return]


def check_answer(client: InProcessClient, endpoint: str, body: bytes) -> None:
    reply = client.post(f"/{endpoint}", body)
    assert reply.status_code in (200, 400), reply.text
    answer = reply.json()
    if reply.status_code == 400:
        assert answer["kind"] == "Status" and answer["message"].startswith("gpuwarden: ")
        assert "internal error" not in answer["message"]
        return
    sent = json.loads(body)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] in (400, 403) and response["status"]["message"]
    assert response.get("auditAnnotations", {}).get("evaluation") != "error"
    assert all(len(w) <= 120 for w in response.get("warnings", []))
    assert all(isinstance(v, str) for v in response.get("auditAnnotations", {}).values())
    if "patch" in response:
        assert endpoint == "mutate"
        patch = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.apply_patch(sent["request"]["object"], patch)  # raises if it does not apply


def encode(document: Any) -> bytes:
    return json.dumps(document, allow_nan=False).encode()


@FUZZ
@given(document=mutated_reviews(), endpoint=st.sampled_from(["validate", "mutate"]))
def test_mutated_reviews_never_break_the_webhook(
    client: InProcessClient, document: Any, endpoint: str
) -> None:
    check_answer(client, endpoint, encode(document))


@FUZZ
@given(document=json_values, endpoint=st.sampled_from(["validate", "mutate"]))
def test_arbitrary_json_gets_400_or_a_review(
    client: InProcessClient, document: Any, endpoint: str
) -> None:
    check_answer(client, endpoint, encode(document))


@FUZZ
@given(body=st.binary(max_size=512))
def test_arbitrary_bytes_get_400_or_a_review(client: InProcessClient, body: bytes) -> None:
    reply = client.post("/validate", body)
    assert reply.status_code in (200, 400)


@FUZZ
@given(data=st.data())
def test_truncated_reviews_get_400(client: InProcessClient, data: st.DataObject) -> None:
    body = encode(data.draw(st.sampled_from(SEEDS)))
    cut = data.draw(st.integers(0, len(body) - 1))
    reply = client.post("/validate", body[:cut])
    assert reply.status_code == 400
    assert "not JSON" in reply.json()["message"] or cut == 0


# ---------------------------------------------------------------------------- hostile sizes

# Where a hostile string goes, and the Kubernetes limit on it there (None: no limit checked), in
# characters; annotations are limited in bytes, all together.
SIZED_PLACES: list[tuple[tuple[str, ...], int | None]] = [
    (("metadata", "name"), 253),
    (("metadata", "labels", "team"), 63),
    (("metadata", "annotations", "note"), 256 * 1024 - 4 - 17 - len("gpuwarden.io/checkpoint")),
    (("spec", "nodeSelector", "nvidia.com/gpu.product"), 63),
    (("spec", "nodeSelector", "pool"), 63),
    (("spec", "containers", "0", "image"), None),
    (("spec", "containers", "0", "resources", "limits", "nvidia.com/gpu"), None),
    (("spec", "priorityClassName"), None),
]
SIZES = [0, 62, 63, 64, 253, 254, 4096, 256 * 1024, 256 * 1024 + 1, 2 * 1024 * 1024]


def place(document: dict[str, Any], path: tuple[str, ...], value: str) -> None:
    node: Any = document
    for step in path[:-1]:
        node = node[int(step)] if isinstance(node, list) else node.setdefault(step, {})
    node[path[-1]] = value


@FUZZ
@given(where=st.sampled_from(SIZED_PLACES), size=st.sampled_from(SIZES),
       char=st.sampled_from(["A", "1", "-", "é", "NVIDIA-A100-"]),
       endpoint=st.sampled_from(["validate", "mutate"]))
def test_hostile_sizes_are_refused_or_judged_in_time(
    client: InProcessClient, where: tuple[tuple[str, ...], int | None], size: int, char: str,
    endpoint: str,
) -> None:
    path, limit = where
    value = (char * (size // len(char) + 1))[:size]
    pod = gpu_workload("Pod", labels=TAGS, selector={"nvidia.com/gpu.product": A100})
    place(pod, path, value)
    body = encode(review(pod))
    started = time.perf_counter()
    check_answer(client, endpoint, body)
    assert time.perf_counter() - started < 1.0, "a hostile size took the deadline's time"
    answer = client.post(f"/{endpoint}", body).json()
    if len(body) > MAX_BODY_BYTES:  # request.name repeats metadata.name
        assert answer["code"] == 400 and "cap" in answer["message"]
        return
    response = answer["response"]
    size_there = len(value.encode()) if path[1] == "annotations" else len(value)
    over = limit is not None and size_there > limit
    refused = response.get("auditAnnotations", {}).get("evaluation") == "invalid-object"
    assert refused == over, (path, size, response.get("status"))
