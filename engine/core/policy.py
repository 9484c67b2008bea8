"""Policy files: the pydantic schema, loading with `file:line` errors, overrides, compilation.

A policy file is YAML with `policies:` (a list of policies) and/or `overrides:` (changes to
policies loaded from earlier files, by id). The built-in pack is the path `builtin`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from engine.core import checks as _checks  # noqa: F401  (registers the built-in checks)
from engine.core.aggregates import AGGREGATORS
from engine.core.conditions import (
    CHECKS,
    OPERATORS,
    Condition,
    PolicySyntaxError,
    compile_condition,
    walk,
)
from engine.core.costs import ESTIMATORS
from engine.core.errors import InputError
from engine.core.model import Category, Door, Enforcement, Severity
from engine.core.programs import Program, policy_kind, policy_kinds
from engine.core.templates import MessageTemplate, TemplateRejected, compile_message
from engine.core.yamltext import line_at, line_of, load_yaml_documents

BUILTIN = "builtin"
POLICY_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")
DOORS: tuple[Door, ...] = ("plan", "admission", "runtime")
MAX_POLICY_DEPTH = 64  # YAML nesting of a policy file (conditions nest a dozen levels at most)
# The remediation actions a policy may name (`remediations:`), implemented by
# `remediations.registry` (which refuses to register any other name).
REMEDIATION_ACTIONS = frozenset({"advise-spot", "advise-tags", "advise-encryption", "advise-mig",
                                 "stop", "mark-violation"})


class EnforcementSpec(BaseModel):
    """What a violation does at each door; `off` means the policy is not evaluated there."""

    model_config = ConfigDict(extra="forbid")

    plan: Enforcement = "audit"
    admission: Enforcement = "audit"
    runtime: Enforcement = "audit"

    def at(self, door: Door) -> Enforcement:
        return getattr(self, door)  # type: ignore[no-any-return]


class PolicySpec(BaseModel):
    """One policy as written in YAML."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable id, lowercase letters, digits and '-'.")
    title: str
    description: str = ""
    severity: Severity
    resources: list[Category] = Field(min_length=1, description="Normalized categories.")
    scope: Any = Field(default=None, description="Condition selecting the resources it governs.")
    violation: Any = Field(default=None, description="Condition that holds when the resource "
                           "violates it (or give `rego`).")
    rego: Any = Field(default=None, description="A Rego module deciding violations "
                      "instead of `violation` (see docs/rego.md).")
    message: str = Field(default="", description="Jinja2 template: resource, params, details, "
                         "usd filter (with `rego`, optional: msg is the Rego message).")
    help: str = Field(default="", description="How to fix it.")
    parameters: dict[str, Any] = Field(default_factory=dict)
    enforcement: EnforcementSpec = Field(default_factory=EnforcementSpec)
    remediations: list[str] = Field(default_factory=list)
    cost: str = Field(default="none", description="Cost estimator: " + ", ".join(ESTIMATORS))
    exempt: list[str] = Field(default_factory=list, description="Resource id globs exempted.")
    aggregate: str | None = Field(default=None, description="Judge groups of the resources the "
                                  "scope selects instead of each one: " + ", ".join(AGGREGATORS))

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if not POLICY_ID.match(value):
            raise ValueError(f"invalid policy id {value!r}: use lowercase letters, digits and '-'")
        return value

    @model_validator(mode="after")
    def _violation_or_rego(self) -> PolicySpec:
        if self.rego is not None and self.violation is not None:
            raise ValueError("give either 'violation' or 'rego', not both")
        if self.rego is None and self.violation is None:
            raise ValueError(f"policy {self.id}: 'violation' is required (or 'rego')")
        if self.rego is None and not self.message:
            raise ValueError(f"policy {self.id}: 'message' is required")
        if self.rego is not None and self.aggregate:
            raise ValueError("'aggregate' judges groups with a YAML 'violation', not with 'rego'")
        return self

    @field_validator("aggregate")
    @classmethod
    def _known_aggregate(cls, value: str | None) -> str | None:
        if value is not None and value not in AGGREGATORS:
            raise ValueError(f"unknown aggregate {value!r} (one of: {', '.join(AGGREGATORS)})")
        return value

    @field_validator("cost")
    @classmethod
    def _known_cost(cls, value: str) -> str:
        if value not in ESTIMATORS:
            raise ValueError(f"unknown cost estimator {value!r} (one of: {', '.join(ESTIMATORS)})")
        return value

    @field_validator("rego", mode="before")
    @classmethod
    def _rego_block(cls, value: Any) -> Any:
        """Validated by the `rego` policy kind's model (`engine.core.programs`)."""
        return None if value is None else policy_kind("rego").spec_model.model_validate(value)

    @field_validator("remediations")
    @classmethod
    def _known_remediations(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in REMEDIATION_ACTIONS]
        if unknown:
            raise ValueError(f"unknown remediation {unknown[0]!r} "
                             f"(one of: {', '.join(sorted(REMEDIATION_ACTIONS))})")
        return value


class EnforcementOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan: Enforcement | None = None
    admission: Enforcement | None = None
    runtime: Enforcement | None = None


class PolicyOverride(BaseModel):
    """Changes to an already loaded policy (a built-in one, typically)."""

    model_config = ConfigDict(extra="forbid")

    disabled: bool = False
    severity: Severity | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    enforcement: EnforcementOverride | None = None
    exempt: list[str] = Field(default_factory=list)


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    apiVersion: Literal["gpuwarden.io/v1"] = "gpuwarden.io/v1"
    policies: list[PolicySpec] = Field(default_factory=list)
    overrides: dict[str, PolicyOverride] = Field(default_factory=dict)


@dataclass(frozen=True)
class CompiledPolicy:
    spec: PolicySpec
    scope: Condition | None
    violation: Condition
    message: MessageTemplate
    file: str
    exempt: tuple[re.Pattern[str], ...]
    raw: Mapping[str, Any]
    rego: Program | None = None  # a Rego policy: `violation` is its program's verdict
    base_dir: Path | None = None  # where the policy file is (its Rego modules are relative)

    @property
    def id(self) -> str:
        return self.spec.id

    @cached_property
    def categories(self) -> frozenset[Category]:
        return frozenset(self.spec.resources)

    @cached_property
    def evidence_nodes(self) -> tuple[Condition, ...]:
        roots = [self.violation] + ([self.scope] if self.scope is not None else [])
        nodes = [node for root in roots for node in walk(root)]
        return tuple(n for n in nodes if type(n).evidence is not Condition.evidence)

    @cached_property
    def doors(self) -> dict[Door, Enforcement]:
        return {door: self.spec.enforcement.at(door) for door in DOORS}

    def enforcement(self, door: Door) -> Enforcement:
        return self.doors[door]

    def render_message(self, **values: Any) -> str:
        """The message, whitespace collapsed, rendered in the template sandbox
        (`engine.core.templates`); the title and the reason when the template fails."""
        return self.message.render(values, fallback=self.spec.title)


def _validation_message(error: Mapping[str, Any]) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown key {str(error['loc'][-1])!r}"
    msg = str(error["msg"]).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


@dataclass(frozen=True)
class ParsedFile:
    policies: list[tuple[PolicySpec, Any]]  # each spec with its raw YAML node (for lines)
    overrides: dict[str, PolicyOverride]


def parse_policy_file(text: str, file: str) -> ParsedFile:
    parsed = ParsedFile([], {})
    for doc in load_yaml_documents(text, file, max_depth=MAX_POLICY_DEPTH):
        if not isinstance(doc, Mapping):
            raise InputError("a policy file is a mapping with 'policies:'", file=file,
                             line=line_of(doc))
        try:
            part = PolicyFile.model_validate(doc)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise InputError(
                _validation_message(error), file=file, line=line_at(doc, error["loc"])
            ) from None
        parsed.policies.extend(zip(part.policies, doc.get("policies") or [], strict=True))
        parsed.overrides.update(part.overrides)
    return parsed


def compile_policy(
    spec: PolicySpec,
    file: str,
    raw: Any = None,
    *,
    base_dir: Path | None = None,
    rego: Program | None = None,
    files: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CompiledPolicy:
    """Compile conditions (or the Rego program) and the message template once; every error
    names file and line. `rego` reuses an already compiled program (overrides); `files` holds
    the parsed content of parameters that name files (`engine.loading.parameter_files`);
    `environ`, the environment the loading step read (a remote Rego policy's `token_env`)."""
    raw = raw if isinstance(raw, Mapping) else {}
    params = {**spec.parameters, **files} if files else spec.parameters
    try:
        scope = None if spec.scope is None else compile_condition(
            raw.get("scope", spec.scope), params
        )
        if spec.rego is not None:
            rego = rego or policy_kind("rego").compile(
                spec.rego, policy_id=spec.id, file=file, base_dir=base_dir,
                line=line_of(raw, "rego"), environ=environ or {})
            violation: Condition = rego.verdict(spec.parameters)
        else:
            violation = compile_condition(raw.get("violation", spec.violation), params)
    except PolicySyntaxError as exc:
        raise InputError(f"policy {spec.id}: {exc.message}", file=file,
                         line=exc.line or line_of(raw)) from None
    try:
        message = compile_message(spec.message)
    except TemplateRejected as exc:
        line = line_of(raw, "message") or line_of(raw)
        if line is not None and exc.lineno and "\n" in spec.message.rstrip("\n"):
            line += exc.lineno  # a block scalar: its first line follows the key
        raise InputError(f"policy {spec.id}: message template: {exc.message}", file=file,
                         line=line) from None
    exempt = tuple(re.compile(fnmatch.translate(glob)) for glob in spec.exempt)
    return CompiledPolicy(spec, scope, violation, message, file, exempt, raw, rego, base_dir)


def overridden_spec(spec: PolicySpec, override: PolicyOverride, file: str) -> PolicySpec:
    """The spec with an override file's parameters, exemptions, severity and enforcement."""
    unknown = set(override.parameters) - set(spec.parameters)
    if unknown:
        raise InputError(f"override of {spec.id}: unknown parameter {sorted(unknown)[0]!r} "
                         f"(parameters: {', '.join(spec.parameters) or 'none'})", file=file)
    update: dict[str, Any] = {
        "parameters": {**spec.parameters, **override.parameters},
        "exempt": [*spec.exempt, *override.exempt],
    }
    if override.severity is not None:
        update["severity"] = override.severity
    if override.enforcement is not None:
        changes = override.enforcement.model_dump(exclude_none=True)
        update["enforcement"] = spec.enforcement.model_copy(update=changes)
    return spec.model_copy(update=update)


def condition_schema() -> dict[str, Any]:
    """JSON Schema of the condition language, from the registered checks' argument models."""
    value = {
        "type": "object",
        "required": ["field"],
        "additionalProperties": False,
        "properties": {
            "field": {"type": "string"},
            "op": {"enum": list(OPERATORS)},
            "value": {},
            "param": {"type": "string"},
        },
    }
    ref = {"$ref": "#/$defs/Condition"}
    forms: list[dict[str, Any]] = [
        value,
        {"type": "object", "required": ["all"], "additionalProperties": False,
         "properties": {"all": {"type": "array", "items": ref, "minItems": 1}}},
        {"type": "object", "required": ["any"], "additionalProperties": False,
         "properties": {"any": {"type": "array", "items": ref, "minItems": 1}}},
        {"type": "object", "required": ["not"], "additionalProperties": False,
         "properties": {"not": ref}},
    ]
    for key, check in sorted(CHECKS.items()):
        args = check.Args.model_json_schema()
        accepted: list[dict[str, Any]] = [args, {"type": "null"}]
        if check.shorthand:
            accepted.append(args["properties"][check.shorthand])
        forms.append({"type": "object", "required": [key], "additionalProperties": False,
                      "description": check.description,
                      "properties": {key: {"anyOf": accepted}}})
    return {"anyOf": forms}


def policy_file_schema() -> dict[str, Any]:
    schema = PolicyFile.model_json_schema()
    defs = schema.setdefault("$defs", {})
    spec = defs["PolicySpec"]["properties"]
    for key, kind in policy_kinds().items():
        model = kind.spec_model
        defs[model.__name__] = model.model_json_schema()
        spec[key] = {"anyOf": [{"$ref": f"#/$defs/{model.__name__}"}, {"type": "null"}],
                     "default": None, "description": spec[key].get("description", "")}
    schema["$defs"] = defs = dict(sorted(defs.items()))  # in pydantic's order
    defs["Condition"] = condition_schema()
    spec["scope"] = {"anyOf": [{"$ref": "#/$defs/Condition"}, {"type": "null"}],
                     "description": spec["scope"].get("description", "")}
    spec["violation"] = {"anyOf": [{"$ref": "#/$defs/Condition"}, {"type": "null"}],
                         "description": spec["violation"].get("description", "")}
    schema["title"] = "gpuwarden policy file"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"  # pydantic's dialect
    return schema
