"""The input document a Rego policy sees, per door. Stable: policies are written against it.

- `input: plan` (PR check): the whole `terraform show -json` plan, as conftest gives it.
- `input: resource` (every door): one normalized resource (`Resource` as JSON) with `raw`, the
  native object.
- `input: admission` (admission; at runtime for Kubernetes workloads, an audit as Gatekeeper's
  does): an AdmissionReview `{apiVersion, kind, request, review, parameters}`.

For admission, `request` is the AdmissionRequest (conftest / kube-mgmt policies read
`input.request.object`), `review` is the same object under Gatekeeper's name
(`input.review.object`) and `parameters` are the policy's parameters (Gatekeeper's
`input.parameters`). The webhook's own request is used when the caller provides it with
`admission_request()`; otherwise (runtime audit, or a caller that passes only the resource) the
request is rebuilt from the object: operation `CREATE`, empty `uid` and `userInfo`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from engine.model import Resource

InputKind = Literal["resource", "plan", "admission"]
ADMISSION_API_VERSION = "admission.k8s.io/v1"

_CURRENT_REQUEST: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "gpuwarden_admission_request", default=None
)


@contextmanager
def admission_request(request: Mapping[str, Any]) -> Iterator[None]:
    """Evaluate inside this block with `request` (an AdmissionRequest) as the admission input."""
    token = _CURRENT_REQUEST.set(request)
    try:
        yield
    finally:
        _CURRENT_REQUEST.reset(token)


def resource_input(resource: Resource) -> dict[str, Any]:
    document = resource.model_dump(mode="json")
    document["unknown"] = sorted(resource.unknown)
    return document


def admission_input(resource: Resource, parameters: Mapping[str, Any]) -> dict[str, Any]:
    request = _matching_request(resource) or synthesize_request(resource)
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "request": request,
        "review": request,
        "parameters": dict(parameters),
    }


def _matching_request(resource: Resource) -> Mapping[str, Any] | None:
    request = _CURRENT_REQUEST.get()
    if request is None:
        return None
    obj = request.get("object")
    if not isinstance(obj, Mapping) or obj.get("kind") != resource.kind:
        return None
    return request


def synthesize_request(resource: Resource) -> dict[str, Any]:
    """An AdmissionRequest for a Kubernetes object that arrived without one."""
    obj = resource.raw
    api_version = obj.get("apiVersion") if isinstance(obj.get("apiVersion"), str) else "v1"
    group, _, version = str(api_version).rpartition("/")
    metadata = _mapping(obj.get("metadata"))
    return {
        "uid": "",
        "kind": {"group": group, "version": version, "kind": resource.kind},
        "resource": {"group": group, "version": version, "resource": resource.kind.lower() + "s"},
        "name": metadata.get("name") or resource.name,
        "namespace": resource.namespace,
        "operation": "CREATE",
        "userInfo": {},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }


def request_of(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """The AdmissionRequest in an AdmissionReview envelope or a bare request; None otherwise."""
    if document.get("kind") == "AdmissionReview" and isinstance(document.get("request"), dict):
        return dict(document["request"])
    if "operation" in document and ("object" in document or "oldObject" in document):
        return dict(document)
    return None


def request_for_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A CREATE AdmissionRequest for a plain manifest (tests and `policies test` cases)."""
    api_version = str(obj.get("apiVersion") or "v1")
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind") or "")
    metadata = _mapping(obj.get("metadata"))
    return {
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace") or "default",
        "operation": "CREATE",
        "userInfo": {"username": "gpuwarden-test"},
        "object": dict(obj),
        "oldObject": None,
        "dryRun": False,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
