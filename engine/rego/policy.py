"""The `rego:` block of a policy and its compiled program.

```yaml
- id: gpu-spot-required
  ...
  rego:
    module: gpu_spot_required.rego        # or a list: [lib.rego, main.rego]; relative to this file
    package: gpuwarden.spot               # default: the first module's package
    data: [builtin:catalog, extra.json]   # data documents merged at `data` (like `opa eval -d`)
    input: plan                           # plan | resource | admission (see engine.rego.inputs)
    evaluator: embedded                   # embedded (regorus) | remote (an OPA server)
    opa_url: http://opa.internal:8181     # remote only
```

Compiling loads the modules and data and hands them to the evaluator, which rejects what it can
(parse errors, unknown functions) before anything is evaluated. Each evaluation queries the
package's `deny`, `violation`, `warn` and `unknown` rules (those the modules define) and turns
their values into `RegoMessage`s: a string, or an object with `msg` and optional `severity`,
`resource` and `details`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.core.conditions import Condition, EvalContext
from engine.core.errors import InputError
from engine.core.model import Door, Resource, Severity, State
from engine.core.tristate import Tri
from engine.core.yamltext import load_yaml_documents
from engine.loading.files import FileTooLarge, max_policy_file_bytes, read_bounded_bytes
from engine.rego.common import (
    CONVENTION_RULES,
    RegoAborted,
    RegoError,
    RegoEvaluator,
    RegoModule,
    RegoUnavailable,
    query_path,
    strip_comments,
)
from engine.rego.differences import warn_known_differences
from engine.rego.gatekeeper import MAX_SYNC_KINDS, SyncKind, check_match
from engine.rego.inputs import InputKind, admission_input, resource_input

EvaluatorKind = Literal["embedded", "remote"]
FailurePolicy = Literal["Fail", "Ignore"]
BUILTIN_CATALOG = "builtin:catalog"
# data.inventory of a policy that declares kinds, until someone replicates them (the webhook)
NOT_REPLICATED = ("only the webhook replicates cluster objects into it (gpuwarden webhook); "
                  "`policies test` cases give them as inventory:")
DEFAULT_TIMEOUT_S = 10.0
PLAN_TIMEOUT_S = 60.0  # a policy over a whole 5,000-change plan may take seconds (conftest-style)
MAX_DATA_BYTES = 16 * 2**20  # one data document
_PACKAGE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_INPUT_REF = re.compile(
    r'\binput\b(?:[ \t]*\.[ \t]*(?P<dot>[A-Za-z_]\w*)|[ \t]*\[[ \t]*"(?P<key>(?:[^"\\]|\\.)*)"'
    r"[ \t]*\])?"
)


class RegoSpec(BaseModel):
    """A policy written in Rego: modules, data, the input it reads and who evaluates it."""

    model_config = ConfigDict(extra="forbid")

    module: str | list[str] = Field(description="Rego file(s), relative to the policy file.")
    package: str | None = Field(default=None, description="Package holding deny/violation/warn/"
                                "unknown rules; default: the first module's package.")
    data: list[str] = Field(default_factory=list, description="JSON/YAML data documents merged "
                            "at `data` (relative paths), or 'builtin:catalog' for "
                            "data.gpuwarden.catalog.")
    input: InputKind = Field(default="resource", description="plan: the whole Terraform plan; "
                             "resource: one normalized resource; admission: an AdmissionReview.")
    evaluator: EvaluatorKind = "embedded"
    opa_url: str | None = Field(default=None, description="OPA server root (evaluator: remote).")
    token_env: str | None = Field(default=None, description="Environment variable holding a "
                                  "bearer token for the OPA server.")
    timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="Seconds one evaluation (embedded) or request "
        f"(remote) may take at the plan/runtime doors; default {DEFAULT_TIMEOUT_S:g}, and "
        f"{PLAN_TIMEOUT_S:g} for an embedded evaluation of a whole plan (input: plan).")
    admission_timeout_s: float = Field(default=2.0, gt=0, le=30,
                                       description="Seconds one evaluation or request may take "
                                       "at admission.")
    match: dict[str, Any] | None = Field(
        default=None, description="A Gatekeeper Constraint's spec.match (kinds, namespaces, "
        "excludedNamespaces, labelSelector, namespaceSelector): input: admission only; the "
        "objects it does not select are not evaluated.")
    failure_policy: FailurePolicy = Field(
        default="Ignore", description="At admission, when the evaluator cannot answer: Ignore "
        "(an unknown finding, a warning) or Fail (a failing finding, a denial).")
    inventory: list[SyncKind] = Field(
        default_factory=list, max_length=MAX_SYNC_KINDS, description="Kinds the webhook "
        "replicates into data.inventory for this policy (Gatekeeper's Config spec.sync.syncOnly "
        "entries: group, version, kind); input: admission, evaluator: embedded.")

    @field_validator("match")
    @classmethod
    def _valid_match(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_match(value)

    @field_validator("package")
    @classmethod
    def _valid_package(cls, value: str | None) -> str | None:
        if value is not None and not _PACKAGE_NAME.match(value.removeprefix("data.")):
            raise ValueError(f"invalid package {value!r}: dotted identifiers, e.g. gpuwarden.spot")
        return value.removeprefix("data.") if value else value

    @model_validator(mode="after")
    def _evaluator_settings(self) -> RegoSpec:
        if self.evaluator == "remote" and not self.opa_url:
            raise ValueError("evaluator: remote needs opa_url (the OPA server's root URL)")
        if self.evaluator == "embedded" and (self.opa_url or self.token_env):
            raise ValueError("opa_url and token_env are for evaluator: remote")
        if not self.modules:
            raise ValueError("module: give at least one .rego file")
        if self.match is not None and self.input != "admission":
            raise ValueError("match (a Gatekeeper spec.match) is for input: admission")
        if self.inventory and (self.input != "admission" or self.evaluator != "embedded"):
            raise ValueError("inventory (data.inventory from the webhook's cluster cache) is for "
                             "input: admission with evaluator: embedded")
        return self

    @property
    def modules(self) -> list[str]:
        return [self.module] if isinstance(self.module, str) else list(self.module)


@dataclass(frozen=True)
class RegoMessage:
    """One message a convention rule yielded."""

    rule: str
    msg: str
    severity: Severity | None = None
    resource: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def result(self) -> Literal["fail", "unknown"]:
        return "unknown" if self.rule == "unknown" else "fail"


@dataclass(frozen=True, eq=False)
class RegoProgram:
    spec: RegoSpec
    policy_id: str
    file: str
    modules: tuple[RegoModule, ...]
    data: Mapping[str, Any]
    package: str
    rules: tuple[str, ...]
    evaluator: RegoEvaluator
    input_keys: frozenset[str] | None  # top-level input keys the modules can read; None: all
    # data.inventory as the webhook last replicated it: why it is incomplete (None: complete)
    inventory_gap: list[str | None] = field(default_factory=lambda: [None])

    @property
    def reads_plan(self) -> bool:
        return self.spec.input == "plan"

    @property
    def reads_documents(self) -> bool:
        """A whole-plan policy: evaluated once per plan document
        (`engine.core.programs.Program`)."""
        return self.reads_plan

    def verdict(self, parameters: Mapping[str, Any]) -> Condition:
        return RegoVerdict(self, parameters)

    @property
    def paths(self) -> list[str]:
        return [query_path(self.package, rule) for rule in self.rules]

    def applies(self, door: Door, resource: Resource) -> bool:
        """Whether a per-resource evaluation at `door` has an input document for `resource`."""
        kind = self.spec.input
        if kind == "resource":
            return True
        if kind == "admission":
            at_door = door == "admission" or (door == "runtime" and
                                              resource.provider == "kubernetes")
            return at_door and self._judged(resource) is not None
        return False

    def _judged(self, resource: Resource) -> Resource | None:
        """What a Gatekeeper Constraint's `spec.match` selects: the object, or the Pod its pod
        template makes (Gatekeeper's expansion); the object itself without a `match`."""
        if self.spec.match is None:
            return resource
        from engine.rego.gatekeeper import judged_resource

        return judged_resource(self.spec.match, resource)

    def input_for(self, resource: Resource, parameters: Mapping[str, Any]) -> dict[str, Any]:
        if self.spec.input == "admission":
            return admission_input(self._judged(resource) or resource, parameters)
        return resource_input(resource, self.input_keys)

    def plan_input(self, plan: Mapping[str, Any]) -> Mapping[str, Any]:
        """The plan, without the top-level keys no module can read (a 5,000-change plan's
        planned_values and prior_state cost more to hand over than the policy costs to run)."""
        if self.input_keys is None:
            return plan
        return {key: value for key, value in plan.items() if key in self.input_keys}

    def use_inventory(self, inventory: Mapping[str, Any], gap: str | None) -> None:
        """Evaluate from now on with `inventory` as `data.inventory` (Gatekeeper's shape, the
        kinds the policy declares); `gap` says why some of it is missing, and admission
        evaluations then fail by the policy's failure_policy instead of passing on half of it."""
        # Evaluations run meanwhile on other threads: they must never see a complete-looking
        # inventory that is not, so a gap is set before the data, and cleared after it.
        if gap is not None:
            self.inventory_gap[0] = gap
        replace = getattr(self.evaluator, "replace_data", None)
        if replace is not None:
            replace({**self.data, "inventory": inventory})
        self.inventory_gap[0] = gap

    def inventory_missing(self, door: Door) -> InputError | None:
        """Why the policy cannot be judged on its data.inventory now, if so: at admission the
        failure_policy decides (`RegoUnavailable`), elsewhere an `unknown` finding
        (`RegoAborted`); never a pass on an inventory that is not all there."""
        gap = self.inventory_gap[0]
        if gap is None:
            return None
        message = f"data.inventory is incomplete: {gap}"
        return RegoUnavailable(message) if door == "admission" else RegoAborted(message)

    def messages(self, input_doc: Any, door: Door) -> list[RegoMessage]:
        missing = self.inventory_missing(door)
        if missing is not None:
            raise missing
        values = self.evaluator.evaluate(self.paths, input_doc, door)
        missing = self.inventory_missing(door)  # a gap found while it ran: its data may be part
        if missing is not None:
            raise missing
        found: list[RegoMessage] = []
        for rule, path in zip(self.rules, self.paths, strict=True):
            if path in values:
                found.extend(to_messages(rule, values[path], self))
        return found

    def messages_many(self, inputs: Iterable[Any],
                      door: Door) -> list[list[RegoMessage] | InputError]:
        """`messages` for each of `inputs`, in order: per input its messages or the error it
        gave. At admission one evaluation per input (`messages`), elsewhere in as few evaluator
        calls as it can (`RegoEvaluator.evaluate_many`: batches)."""
        if door == "admission":
            return [_messages_or_error(self.messages, input_doc, door) for input_doc in inputs]
        missing = self.inventory_missing(door)
        if missing is not None:
            return [missing for _ in inputs]
        found: list[list[RegoMessage] | InputError] = []
        for values in self.evaluator.evaluate_many(self.paths, inputs, door):
            if isinstance(values, InputError):
                found.append(values)
                continue
            try:
                found.append([message for rule, path in zip(self.rules, self.paths, strict=True)
                              if path in values
                              for message in to_messages(rule, values[path], self)])
            except RegoError as exc:
                found.append(exc)
        return found


def _messages_or_error(messages: Callable[[Any, Door], list[RegoMessage]], input_doc: Any,
                       door: Door) -> list[RegoMessage] | InputError:
    try:
        return messages(input_doc, door)
    except InputError as exc:  # RegoError, RegoAborted, RegoUnavailable
        return exc


def to_messages(rule: str, value: Any, program: RegoProgram) -> list[RegoMessage]:
    """A convention rule's value as messages: a set/array of strings or `{msg, ...}` objects,
    a partial object rule (its values), or a boolean (true: one message)."""
    if value is True:
        return [RegoMessage(rule, f"{program.policy_id}: {rule} rule of {program.package} holds")]
    if value is False or value is None:
        return []
    items = list(value.values()) if isinstance(value, dict) and "msg" not in value else value
    if isinstance(items, dict | str):
        items = [items]
    if not isinstance(items, list):
        raise _shape_error(rule, value, program)
    return [_message(rule, item, program) for item in items]


def _message(rule: str, item: Any, program: RegoProgram) -> RegoMessage:
    if isinstance(item, str):
        return RegoMessage(rule, item)
    if not isinstance(item, dict) or not isinstance(item.get("msg"), str):
        raise _shape_error(rule, item, program)
    severity = item.get("severity")
    if severity is not None:
        try:
            severity = Severity(str(severity).lower())
        except ValueError:
            raise RegoError(f"rego: {rule} yielded severity {severity!r} (one of: "
                            f"{', '.join(s.value for s in Severity)})",
                            file=program.modules[0].shown) from None
    resource = item.get("resource")
    details = item.get("details")
    if details is not None and not isinstance(details, dict):
        details = {"value": details}
    return RegoMessage(rule, item["msg"], severity,
                       resource if isinstance(resource, str) and resource else None,
                       dict(details or {}))


def _shape_error(rule: str, value: Any, program: RegoProgram) -> RegoError:
    shown = orjson.dumps(value, default=str).decode()
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return RegoError(f"rego: {program.package}.{rule} must yield strings or objects with a "
                     f"string 'msg', got {shown}", file=program.modules[0].shown)


class RegoVerdict(Condition):
    """`CompiledPolicy.violation` of a Rego policy, for callers that test one resource: true when
    a failing rule yields a message (at the door the resource's state implies)."""

    def __init__(self, program: RegoProgram, parameters: Mapping[str, Any]):
        self.program = program
        self.parameters = parameters

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        door: Door = "admission" if self.program.spec.input == "admission" else (
            "plan" if resource.state is State.PLANNED else "runtime")
        if not self.program.applies(door, resource):
            return None
        try:
            messages = self.program.messages(self.program.input_for(resource, self.parameters),
                                             door)
        except RegoAborted:
            return None  # no verdict: a limit stopped the evaluation
        if any(m.result == "fail" for m in messages):
            return True
        return None if messages else False


# ---------------------------------------------------------------------------- compiling


def compile_rego(spec: RegoSpec, *, policy_id: str, file: str, base_dir: Path | None,
                 line: int | None = None,
                 environ: Mapping[str, str] | None = None) -> RegoProgram:
    """Load modules and data, find the package's rules, build the evaluator. `environ`: the
    environment the loading step read, for `token_env` (never read here)."""
    modules = tuple(_read_module(name, file, base_dir, line) for name in spec.modules)
    if spec.evaluator == "embedded":
        warn_known_differences(modules, policy_id)
    package = spec.package or modules[0].package
    if package is None:
        raise InputError(f"policy {policy_id}: {modules[0].shown} has no package", file=file,
                         line=line)
    in_package = [m for m in modules if m.package == package]
    if not in_package:
        raise InputError(f"policy {policy_id}: no module declares package {package} (found: "
                         f"{', '.join(str(m.package) for m in modules)})", file=file, line=line)
    defined = {name for m in in_package for name in m.rule_names()}
    rules = tuple(rule for rule in CONVENTION_RULES if rule in defined)
    if not rules:
        raise InputError(f"policy {policy_id}: package {package} defines none of the rules "
                         f"{', '.join(CONVENTION_RULES)}", file=file, line=line)
    data = _merged_data(spec.data, file, base_dir, line)
    if spec.inventory and "inventory" in data:
        raise InputError(f"policy {policy_id}: data documents set `inventory`, which the "
                         "policy's `inventory:` kinds fill", file=file, line=line)
    paths = [query_path(package, rule) for rule in rules]
    evaluator = _evaluator(spec, modules, data, paths, policy_id=policy_id, file=file, line=line,
                           environ=environ or {})
    keys = input_keys(modules) if spec.input in ("plan", "resource") else None
    return RegoProgram(spec, policy_id, file, modules, data, package, rules, evaluator, keys,
                       [NOT_REPLICATED if spec.inventory else None])


def _evaluator(spec: RegoSpec, modules: Sequence[RegoModule], data: Mapping[str, Any],
               paths: list[str], *, policy_id: str, file: str, line: int | None,
               environ: Mapping[str, str]) -> RegoEvaluator:
    if spec.evaluator == "embedded":
        from engine.rego.embedded import EmbeddedEvaluator

        default = PLAN_TIMEOUT_S if spec.input == "plan" else DEFAULT_TIMEOUT_S
        return EmbeddedEvaluator(modules, data, entry_points=paths,
                                 timeout_s=spec.timeout_s or default,
                                 admission_timeout_s=spec.admission_timeout_s)
    from engine.rego.remote import RemoteEvaluator

    token = None
    if spec.token_env:
        token = environ.get(spec.token_env)
        if not token:
            raise InputError(f"policy {policy_id}: token_env {spec.token_env} is not set",
                             file=file, line=line)
    assert spec.opa_url is not None
    return RemoteEvaluator(modules, data, url=spec.opa_url, policy_id=policy_id, file=file,
                           timeout_s=spec.timeout_s or DEFAULT_TIMEOUT_S,
                           admission_timeout_s=spec.admission_timeout_s,
                           token=token)


def _resolve(name: str, file: str, base_dir: Path | None) -> tuple[Path, str]:
    """(path to open, path to show in messages) of a file named relative to the policy file."""
    path = Path(name)
    if path.is_absolute():
        return path, name
    real = (base_dir or Path.cwd()) / path
    shown_dir = os.path.dirname(file) if not file.startswith("builtin:") else ""
    return real, os.path.normpath(os.path.join(shown_dir, name))


def _read_module(name: str, file: str, base_dir: Path | None, line: int | None) -> RegoModule:
    real, shown = _resolve(name, file, base_dir)
    if real.suffix != ".rego":
        raise InputError(f"rego module {name!r} is not a .rego file", file=file, line=line)
    try:
        text = read_bounded_bytes(real, max_policy_file_bytes()).decode("utf-8-sig")
    except (OSError, UnicodeDecodeError, FileTooLarge) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise InputError(f"cannot read rego module {shown}: {why}", file=file,
                         line=line) from None
    return RegoModule(shown, text)


def _merged_data(names: Sequence[str], file: str, base_dir: Path | None,
                 line: int | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in names:
        document = catalog_document() if name == BUILTIN_CATALOG else _read_data(
            name, file, base_dir, line)
        conflict = _merge(merged, document)
        if conflict:
            raise InputError(f"data document {name}: {conflict} is already set by an earlier "
                             "document", file=file, line=line)
    return merged


def _read_data(name: str, file: str, base_dir: Path | None, line: int | None) -> dict[str, Any]:
    real, shown = _resolve(name, file, base_dir)
    try:
        text = read_bounded_bytes(real, MAX_DATA_BYTES)
        document = orjson.loads(text) if real.suffix == ".json" else _yaml_data(text, shown)
    except (OSError, FileTooLarge) as exc:
        raise InputError(f"cannot read data document {shown}: "
                         f"{getattr(exc, 'strerror', None) or exc}", file=file,
                         line=line) from None
    except (orjson.JSONDecodeError, UnicodeDecodeError, InputError) as exc:
        first = (str(exc.message) if isinstance(exc, InputError) else str(exc)).splitlines()[0]
        raise InputError(f"data document {shown} does not parse: {first}", file=file,
                         line=line) from None
    if not isinstance(document, dict):
        raise InputError(f"data document {shown} must be an object (it is merged at `data`)",
                         file=file, line=line)
    return document


def _yaml_data(text: bytes, shown: str) -> Any:
    """One YAML document, within the bounds of `engine.core.yamltext` (aliases, nesting)."""
    documents = load_yaml_documents(text.decode("utf-8-sig"), shown)
    if len(documents) > 1:
        raise InputError("expected a single YAML document", file=shown)
    return documents[0] if documents else None


def _merge(into: dict[str, Any], document: Mapping[str, Any], prefix: str = "") -> str | None:
    """Deep-merge objects; the dotted key of the first non-object collision, else None."""
    for key, value in document.items():
        where = f"{prefix}{key}"
        if key in into and isinstance(into[key], dict) and isinstance(value, dict):
            conflict = _merge(into[key], value, where + ".")
            if conflict:
                return conflict
        elif key in into:
            return where
        else:
            into[key] = value
    return None


def catalog_document() -> dict[str, Any]:
    """`data.gpuwarden.catalog`: the built-in instance and accelerator catalog."""
    from engine.core.catalog import builtin_catalog

    catalog = builtin_catalog()
    return {"gpuwarden": {"catalog": {
        "instance_types": {
            name: {"cloud": spec.cloud, "gpu_model": spec.gpu_model, "gpu_count": spec.gpu_count,
                   "gpu_memory_gib": spec.gpu_memory_gib,
                   "on_demand_usd_hr": spec.on_demand_usd_hr}
            for name, spec in catalog.instances.items()
        },
        "accelerators": {
            name: {"cloud": spec.cloud, "gpu_model": spec.gpu_model,
                   "gpu_memory_gib": spec.gpu_memory_gib, "usd_hr_per_gpu": spec.usd_hr_per_gpu}
            for name, spec in catalog.accelerators.items()
        },
        "spot_discounts": dict(catalog.spot_discounts),
    }}}


def input_keys(modules: Sequence[RegoModule]) -> frozenset[str] | None:
    """Top-level input keys the modules can read: every `input` reference is `input.KEY` or
    `input["KEY"]`; None (the whole input) as soon as one is anything else (`input[k]`, `walk(
    input)`, `import input`). A scan that errs only towards keeping more."""
    keys: set[str] = set()
    for module in modules:
        for found in _INPUT_REF.finditer(strip_comments(module.text)):
            key = found.group("dot") or found.group("key")
            if key is None:
                return None
            keys.add(key)
    return frozenset(keys)
