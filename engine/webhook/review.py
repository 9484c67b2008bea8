"""AdmissionReview `admission.k8s.io/v1`: read a request body defensively, build responses.

Nothing here knows about policies. A body the API server could not have sent (too large, not
JSON, not an AdmissionReview) is a `ReviewError`; the app answers it with HTTP 400, or with a
well-formed AdmissionReview refusal when the request's `uid` could be read.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's request size cap
MAX_WARNING_CHARS = 120
MAX_WARNINGS = 16
MAX_AUDIT_KEY_CHARS = 63
JUDGED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\uffff]")
_NOT_QUALIFIED = re.compile(r"[^A-Za-z0-9_.-]+")


class ReviewError(Exception):
    """A body that is not a usable AdmissionReview; `uid` when one could be read anyway."""

    def __init__(self, message: str, uid: str | None = None):
        super().__init__(message)
        self.message = message
        self.uid = uid


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    uid: str
    operation: str
    kind: str  # request.kind.kind: Pod, Deployment, ...
    namespace: str | None
    name: str | None
    dry_run: bool
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    sub_resource: str | None = None
    # The request as the API server sent it (userInfo, options...), for Rego's input.review
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class Decision:
    """What the webhook answers for one request, before it becomes an AdmissionReview."""

    allowed: bool = True
    message: str | None = None
    code: int | None = None
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    patch: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------- parsing


def parse_review(body: bytes) -> AdmissionRequest:
    """The AdmissionRequest inside an AdmissionReview v1 body, or ReviewError saying why not."""
    if len(body) > MAX_BODY_BYTES:
        raise ReviewError(f"request body is {len(body)} bytes, over the {MAX_BODY_BYTES}-byte cap")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"request body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise ReviewError(f"expected an AdmissionReview object, got JSON {_json_type(review)}")
    request = review.get("request")
    uid = _readable_uid(request)
    if review.get("kind") != KIND:
        raise ReviewError(f"expected kind {KIND}, got {_shown(review.get('kind'))}")
    if review.get("apiVersion") != API_VERSION:
        raise ReviewError(
            f"unsupported apiVersion {_shown(review.get('apiVersion'))}: only {API_VERSION} "
            "is served (set admissionReviewVersions: [v1])"
        )
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request object")
    if uid is None:
        raise ReviewError("request.uid is missing or not a non-empty string")
    return _admission_request(request, uid)


def _admission_request(request: dict[str, Any], uid: str) -> AdmissionRequest:
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in _OPERATIONS:
        raise ReviewError(f"request.operation {_shown(operation)} is not one of "
                          f"{', '.join(sorted(_OPERATIONS))}", uid)
    kind_field = request.get("kind")
    kind = kind_field.get("kind") if isinstance(kind_field, dict) else None
    if not isinstance(kind, str) or not kind:
        raise ReviewError("request.kind.kind is missing", uid)
    obj = request.get("object")
    old = request.get("oldObject")
    if operation in JUDGED_OPERATIONS and not isinstance(obj, dict):
        raise ReviewError(f"request.object is missing or not an object for {operation}", uid)
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError("request.object is not an object", uid)
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool) and dry_run is not None:
        raise ReviewError("request.dryRun is not a boolean", uid)
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        kind=kind,
        namespace=_optional_text(request.get("namespace")),
        name=_optional_text(request.get("name")),
        dry_run=bool(dry_run),
        object=obj,
        old_object=old if isinstance(old, dict) else None,
        sub_resource=_optional_text(request.get("subResource")),
        raw=request,
    )


def _readable_uid(request: Any) -> str | None:
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and uid and len(uid) <= 256 else None


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _json_type(value: Any) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------- responses


def review_response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview the API server expects back for `uid`."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.code is not None or decision.message:
        status: dict[str, Any] = {}
        if decision.code is not None:
            status["code"] = decision.code
        if decision.message:
            status["message"] = decision.message
        response["status"] = status
    warnings = [clip_warning(w) for w in decision.warnings[:MAX_WARNINGS]]
    if warnings:
        response["warnings"] = warnings
    if decision.audit_annotations:
        response["auditAnnotations"] = dict(decision.audit_annotations)
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(decision.patch)).decode("ascii")
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def refusal(uid: str, message: str) -> dict[str, Any]:
    """A well-formed answer to a request that could be identified but not judged."""
    return review_response(uid, Decision(allowed=False, code=400, message=message))


def clip_warning(text: str) -> str:
    """One line, printable, at most 120 characters (the API server's limit per warning)."""
    line = _NOT_PRINTABLE.sub("?", " ".join(text.split()))
    if len(line) <= MAX_WARNING_CHARS:
        return line
    return line[: MAX_WARNING_CHARS - 3].rstrip() + "..."


def audit_key(name: str) -> str:
    """An auditAnnotations key: the API server prefixes it with `<webhook name>/`, so the key
    is the name part of a qualified name: no `/`, alphanumeric at both ends, ≤ 63 chars."""
    key = _NOT_QUALIFIED.sub("-", name)[:MAX_AUDIT_KEY_CHARS].strip("-_.")
    return key or "policy"
