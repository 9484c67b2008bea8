"""`gpuwarden policies test DIR`: unit tests for policies, YAML and Rego alike.

Two kinds of test, both found under DIR:

- **Rego `test_` rules** (as `opa test` and `conftest verify` run them): every `.rego` file
  under DIR, with the data documents of the Rego policies in DIR, is loaded into the embedded
  engine; each rule named `test_*` passes when it is true, fails when it is false or undefined,
  and errors when evaluating it errors.
- **YAML cases** (`*_test.yaml`): an input file (a plan, an admission request or manifest, or
  normalized resources, completed from the catalog) goes through the policies at one door,
  and the findings must be those listed under `expect`. They test the engine's answer, so
  they work for YAML policies, Rego policies and the built-in pack alike:

```yaml
policies: [gpu_spot_required.yaml]     # default: the policy files in DIR; `builtin` allowed
cases:
  - name: on-demand GPU node group is denied
    door: plan                         # plan | admission | runtime
    input: ../../tests/fixtures/plans/aws-gpu-plan.json   # or an inline document
    now: "2026-12-01T12:00:00Z"        # default: Tuesday 2026-12-01 12:00 UTC
    expect:
      - {policy: gpu-spot-required, resource: aws_eks_node_group.ondemand_gpu}
      - {policy: gpu-spot-required, resource: aws_instance.mystery, result: unknown}
    exact: true                        # default: no finding beyond those expected
```

Admission cases may give `inventory:` (files or inline objects): data.inventory for the Rego
policies that declare those kinds (`rego.inventory`), as a Gatekeeper suite case's, emptied
again after the case.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.errors import InputError
from engine.core.evaluate import Engine
from engine.core.model import Door, Enforcement, Finding, Resource, Severity, State
from engine.core.policy import BUILTIN, CompiledPolicy
from engine.core.yamltext import line_at, load_yaml_documents
from engine.loading.policies import is_policy_file, load_policies
from engine.rego.common import UNDEFINED, RegoError, RegoModule
from engine.rego.gatekeeper import (
    CLUSTER_SCOPED_KINDS,
    inventory_tree,
    judges_every_kind,
    object_resource,
)
from engine.rego.inputs import admission_request, plan_documents, request_for_manifest, request_of
from engine.rego.policy import NOT_REPLICATED, RegoProgram

DEFAULT_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # a Tuesday, inside business hours
Status = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class TestResult:
    name: str
    status: Status
    detail: str = ""


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str
    resource: str
    result: Literal["fail", "unknown"] = "fail"
    enforcement: Enforcement | None = None
    severity: Severity | None = None
    message: str | None = Field(default=None, description="A substring of the message.")

    def matches(self, finding: Finding) -> bool:
        return (
            finding.policy == self.policy
            and finding.resource.id == self.resource
            and finding.result == self.result
            and (self.enforcement is None or finding.enforcement == self.enforcement)
            and (self.severity is None or finding.severity == self.severity)
            and (self.message is None or self.message in finding.message)
        )

    def __str__(self) -> str:
        return f"{self.policy} {self.result} on {self.resource}"


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    door: Door
    input: str | dict[str, Any] | list[Any]
    now: datetime | None = None
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    # admission: cluster objects as data.inventory for the policies that declare their kinds
    # (files relative to the case file, or inline objects), as a Gatekeeper suite's `inventory:`
    inventory: list[str | dict[str, Any]] = Field(default_factory=list, max_length=256)
    expect: list[Expectation] = Field(default_factory=list)
    exact: bool = True


class CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: list[str] | None = None
    cases: list[Case] = Field(min_length=1)


# ---------------------------------------------------------------------------- entry point


def run_tests(directory: Path, catalog: Catalog | None = None) -> list[TestResult]:
    """Every Rego `test_` rule and YAML case under `directory`."""
    if not directory.is_dir():
        raise InputError("not a directory", file=str(directory))
    catalog = catalog or builtin_catalog()
    local = _local_policies(directory)
    results = run_rego_tests(directory, local)
    for case_file in sorted(p for p in directory.rglob("*") if _is_case_file(p)):
        results.extend(run_case_file(case_file, local, catalog))
    if not results:
        raise InputError("no tests: write test_ rules in .rego files or cases in *_test.yaml",
                         file=str(directory))
    return results


def render_results(results: Sequence[TestResult], verbose: bool = False) -> str:
    lines = [f"{r.status.upper():5} {r.name}" + (f": {r.detail}" if r.detail else "")
             for r in results if verbose or r.status != "pass"]
    counts = {status: sum(1 for r in results if r.status == status)
              for status in ("pass", "fail", "error")}
    lines.append(f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors "
                 f"({len(results)} tests)")
    return "\n".join(lines)


def _is_case_file(path: Path) -> bool:
    return path.suffix in (".yaml", ".yml") and path.stem.endswith("_test")


def _has_policy_files(directory: Path) -> bool:
    """Test inputs may be YAML beside the policies (manifests, AdmissionReviews): only policy
    files count (the loader's rule, `is_policy_file`)."""
    return any(is_policy_file(p) for p in directory.rglob("*"))


def _local_policies(directory: Path) -> list[CompiledPolicy]:
    return load_policies([str(directory)]) if _has_policy_files(directory) else []


# ---------------------------------------------------------------------------- Rego tests


def run_rego_tests(directory: Path, policies: Sequence[CompiledPolicy]) -> list[TestResult]:
    modules = _test_modules(directory, policies)
    tests = [(module.package, rule) for module in modules
             for rule in module.rule_names() if rule.startswith("test_") and module.package]
    if not tests:
        return []
    from engine.rego.embedded import EmbeddedEvaluator

    data = _policy_data(policies)
    evaluator = EmbeddedEvaluator(modules, data)
    results = []
    for package, rule in dict.fromkeys(tests):
        name = f"data.{package}.{rule}"
        try:
            value = evaluator.run_rule(str(package), rule)
        except RegoError as exc:
            results.append(TestResult(name, "error", str(exc)))
            continue
        passed = value is True
        detail = "" if passed else "undefined" if value is UNDEFINED else f"got {_short(value)}"
        results.append(TestResult(name, "pass" if passed else "fail", detail))
    return results


def _test_modules(directory: Path, policies: Sequence[CompiledPolicy]) -> list[RegoModule]:
    """The policies' modules (as they name them) plus every other .rego file under DIR."""
    by_path: dict[str, RegoModule] = {}
    for policy in policies:
        program = _program(policy)
        if program is None:
            continue
        for module, real in zip(program.modules, _real_paths(program, policy), strict=True):
            by_path.setdefault(os.path.realpath(str(real)), module)
    for path in sorted(directory.rglob("*.rego")):
        key = os.path.realpath(str(path))
        if key not in by_path:
            by_path[key] = RegoModule(str(path), path.read_text("utf-8-sig"))
    return list(by_path.values())


def _program(policy: CompiledPolicy) -> RegoProgram | None:
    return policy.rego if isinstance(policy.rego, RegoProgram) else None


def _real_paths(program: RegoProgram, policy: CompiledPolicy) -> list[Path]:
    base = policy.base_dir or Path.cwd()
    return [Path(name) if Path(name).is_absolute() else base / name
            for name in program.spec.modules]


def _policy_data(policies: Sequence[CompiledPolicy]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for policy in policies:
        program = _program(policy)
        if program is not None:
            _merge_into(merged, program.data)
    return merged


def _merge_into(into: dict[str, Any], document: Mapping[str, Any]) -> None:
    for key, value in document.items():
        if isinstance(into.get(key), dict) and isinstance(value, dict):
            _merge_into(into[key], value)
        else:
            into.setdefault(key, value)


def _short(value: Any) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= 120 else text[:117] + "..."


# ---------------------------------------------------------------------------- YAML cases


def run_case_file(path: Path, local: Sequence[CompiledPolicy],
                  catalog: Catalog) -> list[TestResult]:
    shown = str(path)
    documents = load_yaml_documents(_read_text(path), shown)
    if len(documents) != 1 or not isinstance(documents[0], Mapping):
        raise InputError("a test case file is one mapping with 'cases:'", file=shown)
    node = documents[0]
    try:
        case_file = CaseFile.model_validate(node)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise InputError(f"{where}: {error['msg']}", file=shown,
                         line=line_at(node, error["loc"])) from None
    policies = _case_policies(case_file, path, local)
    engine = Engine(policies, catalog)
    results = []
    for index, case in enumerate(case_file.cases):
        name = f"{shown}: {case.name}"
        try:
            findings = run_case(engine, case, path.parent, shown)
        except InputError as exc:
            line = line_at(node, ("cases", index))
            results.append(TestResult(name, "error", f"line {line}: {exc}" if line else str(exc)))
            continue
        results.append(_judge(name, case, findings))
    return results


def _read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=str(path)) from None


def _case_policies(case_file: CaseFile, path: Path,
                   local: Sequence[CompiledPolicy]) -> list[CompiledPolicy]:
    if case_file.policies is None:
        if not local:
            raise InputError("no policy files next to the cases; list them under 'policies:'",
                             file=str(path))
        return list(local)
    names = [name if name == BUILTIN or Path(name).is_absolute() else str(path.parent / name)
             for name in case_file.policies]
    return load_policies(names)


def run_case(engine: Engine, case: Case, base: Path, shown: str) -> list[Finding]:
    now = case.now or DEFAULT_NOW
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    if case.door == "plan":
        return _plan_case(engine, case, base, now)
    if case.door == "admission":
        return _admission_case(engine, case, base, now)
    from engine.core.enrich import enrich

    try:
        resources = [enrich(Resource.model_validate(item), engine.catalog)
                     for item in _documents(case, base)]
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise InputError(f"not a normalized resource: {where}: {error['msg']}") from None
    return engine.evaluate(resources, now, door="runtime").findings


def _documents(case: Case, base: Path) -> list[Any]:
    """The case's input as a list of documents (a file may hold several YAML documents)."""
    if not isinstance(case.input, str):
        return case.input if isinstance(case.input, list) else [case.input]
    return _file_documents(case.input, base)


def _file_documents(name: str, base: Path) -> list[Any]:
    """The documents of a JSON or YAML file named relative to the case file."""
    path = Path(name) if Path(name).is_absolute() else base / name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read input: {exc.strerror or exc}", file=str(path)) from None
    if path.suffix == ".json":
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"input is not JSON: {exc}", file=str(path)) from None
        return document if isinstance(document, list) else [document]
    try:
        return [d for d in yaml.safe_load_all(data.decode("utf-8-sig")) if d is not None]
    except yaml.YAMLError as exc:
        raise InputError(f"input is not YAML: {str(exc).splitlines()[0]}",
                         file=str(path)) from None


def _plan_case(engine: Engine, case: Case, base: Path, now: datetime) -> list[Finding]:
    from engine.sources.terraform import check_plan_document, plan_resources, read_plan

    if isinstance(case.input, str):
        source = str(Path(case.input) if Path(case.input).is_absolute() else base / case.input)
        plan = read_plan(source)
    else:
        source = "<inline plan>"
        plan = case.input if isinstance(case.input, dict) else {}
        check_plan_document(case.input, source)
    resources = plan_resources(plan, source, engine.catalog)
    return engine.evaluate(resources, now, door="plan", documents=plan_documents([plan])).findings


def _admission_case(engine: Engine, case: Case, base: Path, now: datetime) -> list[Finding]:
    with _case_inventory(engine.policies, _inventory_objects(case, base)):
        return _admission_findings(engine, case, base, now)


def _admission_findings(engine: Engine, case: Case, base: Path,
                        now: datetime) -> list[Finding]:
    from engine.sources.kubernetes import workload_resource

    every_kind = any(judges_every_kind(policy) for policy in engine.policies)
    findings: list[Finding] = []
    for document in _documents(case, base):
        if not isinstance(document, dict):
            raise InputError("an admission input is an AdmissionReview, an AdmissionRequest "
                             "or a Kubernetes object")
        request = request_of(document) or request_for_manifest(document)
        obj = request.get("object")
        if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
            continue  # the webhook does not judge deletes and connects
        if obj.get("kind") not in CLUSTER_SCOPED_KINDS:
            obj = _with_namespace(obj, request)
        resource = workload_resource(obj, case.namespace_labels, catalog=engine.catalog,
                                     state=State.PLANNED)
        if resource is None and every_kind:  # as the webhook: Services, Ingresses, Namespaces
            resource = _object_resource(obj, case)
        if resource is None:
            continue
        with admission_request({**request, "object": obj}):
            findings.extend(engine.evaluate([resource], now, door="admission").findings)
    return findings


def _object_resource(obj: dict[str, Any], case: Case) -> Resource:
    namespace = _mapping_of(obj.get("metadata")).get("namespace")
    return object_resource(obj, namespace if isinstance(namespace, str) and namespace else None,
                           case.namespace_labels)


def _inventory_objects(case: Case, base: Path) -> list[dict[str, Any]]:
    objects: list[Any] = []
    for entry in case.inventory:
        objects.extend(_file_documents(entry, base) if isinstance(entry, str) else [entry])
    for obj in objects:
        if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str) \
                or not isinstance(obj.get("kind"), str):
            raise InputError("an inventory object is a Kubernetes object with apiVersion and "
                             "kind")
    return objects


@contextmanager
def _case_inventory(policies: Sequence[CompiledPolicy],
                    objects: Sequence[dict[str, Any]]) -> Iterator[None]:
    """The case's objects as data.inventory of each policy that declares their kinds (the
    namespaced ones are those with a namespace), and none again after."""
    programs = [program for program in map(_program, policies)
                if program is not None and program.spec.inventory]
    for program in programs:
        kinds = {(k.api_version, k.kind) for k in program.spec.inventory}
        mine = [obj for obj in objects if (obj["apiVersion"], obj["kind"]) in kinds]
        program.use_inventory(inventory_tree(
            (obj["apiVersion"], obj["kind"], bool(_mapping_of(obj.get("metadata")).get(
                "namespace")), [obj]) for obj in mine), None)
    try:
        yield
    finally:
        for program in programs:
            program.use_inventory(inventory_tree(()), NOT_REPLICATED)


def _mapping_of(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _with_namespace(obj: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the API server stores it: a namespace-less object takes the request's."""
    found = obj.get("metadata")
    metadata: dict[str, Any] = found if isinstance(found, dict) else {}
    namespace = request.get("namespace")
    if metadata.get("namespace") or not isinstance(namespace, str) or not namespace:
        return obj
    return {**obj, "metadata": {**metadata, "namespace": namespace}}


def _judge(name: str, case: Case, findings: Sequence[Finding]) -> TestResult:
    remaining = [f for f in findings if f.result in ("fail", "unknown")]
    missing: list[str] = []
    for expected in case.expect:
        match = next((f for f in remaining if expected.matches(f)), None)
        if match is None:
            missing.append(str(expected))
        else:
            remaining.remove(match)
    problems = [f"missing {m}" for m in missing]
    if case.exact:
        problems += [f"unexpected {f.policy} {f.result} on {f.resource.id} ({f.message})"
                     for f in remaining]
    return TestResult(name, "fail" if problems else "pass", "; ".join(problems))
