"""The input document a Rego policy sees, per door. Stable: policies are written against it.

- `input: plan` (PR check): the whole `terraform show -json` plan, as conftest gives it, except
  for its secrets (`redacted_plan`): values marked sensitive (`before_sensitive` /
  `after_sensitive` of resource, drift and output changes, `sensitive_values` of planned and
  prior state, sensitive outputs), attributes that are always secret (passwords, raw keys), and
  sensitive variables (their `value`, and their `default` in the configuration) read
  `"(sensitive)"`. A mark whose shape does not fit its value (`true` for a whole object, a list
  where the value is an object) counts as sensitive.
- `input: resource` (every door): one normalized resource (`Resource` as JSON) with `raw`, the
  native object, and `production` (gpuwarden's verdict on its tags: true, false, or null while
  they are known only after apply); only the top-level keys the modules name when every
  reference names one (`engine.rego.policy.input_keys`).
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

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from engine.core.labels import is_production
from engine.core.model import Resource

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


def resource_input(resource: Resource, keys: frozenset[str] | None = None) -> dict[str, Any]:
    """The resource as JSON and `production`, gpuwarden's verdict on its tags (true, false, or
    null while they are known only after apply: `engine.core.labels.is_production`, the one
    definition YAML policies and enforcement use). With `keys`, only those top-level keys (the
    ones the policy's modules name: the native object under `raw` costs most to hand over)."""
    document = resource.model_dump(mode="json", include=set(keys) if keys is not None else None)
    if "unknown" in document:
        document["unknown"] = sorted(resource.unknown)
    if keys is None or "production" in keys:
        document["production"] = is_production(resource)
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


# ---------------------------------------------------------------------------- plan documents


@dataclass(frozen=True, eq=False)
class PlanDocument:
    """A Terraform plan as `input: plan` policies receive it: the engine passes it through
    unopened (`Engine.evaluate(documents=...)`); redacted once, the first time a policy reads
    it."""

    plan: Mapping[str, Any]

    @cached_property
    def redacted(self) -> dict[str, Any]:
        return redacted_plan(self.plan)


def plan_documents(plans: Iterable[Mapping[str, Any]]) -> list[PlanDocument]:
    """The input documents of `Engine.evaluate` for the plans the resources came from."""
    return [PlanDocument(plan) for plan in plans]


# ---------------------------------------------------------------------------- plan secrets


def redacted_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """`plan` without its secrets (see the module docstring); unchanged parts are shared."""
    result = dict(plan)
    for key in ("resource_changes", "resource_drift"):
        if isinstance(plan.get(key), list):
            result[key] = [_redacted_change(change) for change in plan[key]]
    outputs = plan.get("output_changes")
    if isinstance(outputs, dict):
        result["output_changes"] = {name: _redacted_change(change, body_key=None)
                                    for name, change in outputs.items()}
    if isinstance(plan.get("planned_values"), dict):
        result["planned_values"] = _redacted_values(plan["planned_values"])
    prior = plan.get("prior_state")
    if isinstance(prior, dict) and isinstance(prior.get("values"), dict):
        result["prior_state"] = {**prior, "values": _redacted_values(prior["values"])}
    configuration = plan.get("configuration")
    root = configuration.get("root_module") if isinstance(configuration, dict) else None
    if isinstance(plan.get("variables"), dict):
        result["variables"] = _redacted_variables(plan["variables"], root)
    if isinstance(root, dict):
        result["configuration"] = {**_mapping(configuration), "root_module": _redacted_config(root)}
    return result


def fitted_marks(value: Any, marks: Any) -> Any:
    """Sensitivity marks that fit `value`'s shape: `True` where a mark does not fit (a list or
    object mark over a value of another shape, any other truthy mark) and marks it."""
    if marks is None or marks is False:
        return None
    if isinstance(value, dict) and isinstance(marks, dict):
        return {key: fitted_marks(value.get(key), mark) for key, mark in marks.items()}
    if isinstance(value, list) and isinstance(marks, list):
        return [fitted_marks(item, mark) for item, mark in zip(value, marks, strict=False)]
    if value is None and isinstance(marks, dict | list):
        return None
    return True


def _redact(value: Any, marks: Any) -> Any:
    from engine.sources.terraform import redact_sensitive as redact_marked

    return redact_marked(value, fitted_marks(value, marks))


def _redacted_change(change: Any, body_key: str | None = "change") -> Any:
    body = change.get(body_key) if body_key and isinstance(change, dict) else change
    if not isinstance(body, dict):
        return change
    redacted = dict(body)
    for side in ("before", "after"):
        if side in body:
            redacted[side] = _redact(body[side], body.get(f"{side}_sensitive"))
    return {**change, body_key: redacted} if body_key else redacted


def _redacted_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """`planned_values` / `prior_state.values`: outputs and modules' resources."""
    result = dict(values)
    outputs = values.get("outputs")
    if isinstance(outputs, dict):
        result["outputs"] = {name: _redacted_output(output) for name, output in outputs.items()}
    if isinstance(values.get("root_module"), dict):
        result["root_module"] = _redacted_module(values["root_module"])
    return result


def _redacted_output(output: Any) -> Any:
    if not isinstance(output, dict) or "value" not in output:
        return output
    marks = True if output.get("sensitive") is not False else None
    return {**output, "value": _redact(output["value"], marks)}


def _redacted_module(module: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(module)
    if isinstance(module.get("resources"), list):
        result["resources"] = [
            {**item, "values": _redact(item.get("values"), item.get("sensitive_values"))}
            if isinstance(item, dict) and "values" in item else item
            for item in module["resources"]
        ]
    if isinstance(module.get("child_modules"), list):
        result["child_modules"] = [_redacted_module(child) if isinstance(child, dict) else child
                                   for child in module["child_modules"]]
    return result


def _sensitive_names(config_module: Any) -> set[str]:
    """Variables a configuration module declares sensitive (any mark but false counts)."""
    variables = _mapping(config_module).get("variables")
    return {name for name, spec in _mapping(variables).items()
            if not isinstance(spec, dict) or spec.get("sensitive") not in (None, False)}


def _redacted_variables(variables: Mapping[str, Any], root: Any) -> dict[str, Any]:
    """Values of variables the root module declares sensitive; all of them when the plan has
    no configuration to tell."""
    secret = _sensitive_names(root) if isinstance(root, dict) else set(variables)
    return {name: {**spec, "value": _redact(spec.get("value"), True)}
            if name in secret and isinstance(spec, dict) and "value" in spec else spec
            for name, spec in variables.items()}


def _redacted_config(module: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration module: sensitive variables' defaults, secret-named expressions of its
    resources, and its module calls' modules."""
    from engine.sources.terraform import redact_sensitive as redact_marked

    result = dict(module)
    secret = _sensitive_names(module)
    variables = module.get("variables")
    if secret and isinstance(variables, dict):
        result["variables"] = {name: {**spec, "default": _redact(spec["default"], True)}
                               if name in secret and isinstance(spec, dict) and "default" in spec
                               else spec for name, spec in variables.items()}
    if isinstance(module.get("resources"), list):
        result["resources"] = [
            {**item, "expressions": redact_marked(item["expressions"], None)}
            if isinstance(item, dict) and isinstance(item.get("expressions"), dict) else item
            for item in module["resources"]
        ]
    calls = module.get("module_calls")
    if isinstance(calls, dict):
        result["module_calls"] = {
            name: {**call, "module": _redacted_config(call["module"])}
            if isinstance(call, dict) and isinstance(call.get("module"), dict) else call
            for name, call in calls.items()
        }
    return result
