"""Gatekeeper ConstraintTemplates and Constraints as gpuwarden Rego policies.

`import_gatekeeper` reads a ConstraintTemplate (templates.gatekeeper.sh v1 / v1beta1, target
admission.k8s.gatekeeper.sh, its Rego inline or under `code: [{engine: Rego}]`) and its
Constraints, and writes the template's Rego unmodified (and its `libs`) beside one policy file
holding one policy per Constraint: its parameters, its `spec.match` (kept under `rego.match`)
and its enforcementAction mapped to the admission door.

`matches` decides a Constraint's `spec.match` for one object as Gatekeeper does: kinds
(apiGroups × kinds, `*` for any), namespaces / excludedNamespaces (a trailing `*` is a prefix),
labelSelector and namespaceSelector (matchLabels and matchExpressions In / NotIn / Exists /
DoesNotExist), name (a `*` at either end is a wildcard) and source (All, Original, Generated:
the Pod a controller's template makes). A cluster-scoped object passes the namespace criteria
except namespaceSelector, which a Namespace object answers with its own labels. `check_match`
refuses a malformed one (a wrong type, an unknown key) at load, with one line.

A template's `metadata.gatekeeper.sh/requires-sync-data` annotation becomes the policies'
`rego.inventory`: the kinds the webhook replicates into `data.inventory` for it (`SyncKind`,
the shape of Gatekeeper's Config `spec.sync.syncOnly`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from engine.core.errors import InputError
from engine.core.model import Category, Resource
from engine.core.policy import CompiledPolicy
from engine.core.yamltext import load_yaml_documents
from engine.loading.files import FileTooLarge, max_policy_file_bytes, read_bounded_bytes
from engine.sources.kubernetes import pod_template_path

TARGET = "admission.k8s.gatekeeper.sh"
TEMPLATE_API_GROUP = "templates.gatekeeper.sh/"
MAX_CONSTRAINTS = 256
MAX_MATCH_ITEMS = 256  # entries of one list in spec.match
MAX_SYNC_KINDS = 64
SYNC_ANNOTATION = "metadata.gatekeeper.sh/requires-sync-data"
_ID_CHARS = re.compile(r"[^a-z0-9-]+")
_TEMPLATE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")  # a file name, too
_ENFORCEMENT = {"deny": "deny", "warn": "warn", "dryrun": "off"}
# Built-in kinds without a namespace: a manifest of one is not put in `default`.
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "Node", "PersistentVolume", "StorageClass", "ClusterRole",
    "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass", "RuntimeClass",
    "IngressClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
    "APIService", "CSIDriver", "DeviceClass",
})


@dataclass(frozen=True)
class Template:
    name: str
    kind: str  # the Constraint kind it defines
    title: str
    rego: str
    libs: tuple[str, ...]
    package: str
    sync: tuple[dict[str, str], ...] = ()  # the kinds its requires-sync-data annotation names


@dataclass(frozen=True)
class Constraint:
    name: str
    parameters: dict[str, Any]
    match: dict[str, Any]
    enforcement: str


# ---------------------------------------------------------------------------- schemas


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class MatchExpression(_Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list, max_length=MAX_MATCH_ITEMS)

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> MatchExpression:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Strict):
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[MatchExpression] = Field(default_factory=list,
                                                     alias="matchExpressions",
                                                     max_length=MAX_MATCH_ITEMS)


class KindSelector(_Strict):
    api_groups: list[str] = Field(default_factory=list, alias="apiGroups",
                                  max_length=MAX_MATCH_ITEMS)
    kinds: list[str] = Field(default_factory=list, max_length=MAX_MATCH_ITEMS)


class Match(_Strict):
    """Gatekeeper's `spec.match`, every field it defines; anything else is refused."""

    kinds: list[KindSelector] = Field(default_factory=list, max_length=MAX_MATCH_ITEMS)
    scope: Literal["*", "Cluster", "Namespaced"] = "*"
    namespaces: list[str] = Field(default_factory=list, max_length=MAX_MATCH_ITEMS)
    excluded_namespaces: list[str] = Field(default_factory=list, alias="excludedNamespaces",
                                           max_length=MAX_MATCH_ITEMS)
    label_selector: LabelSelector | None = Field(default=None, alias="labelSelector")
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")
    name: str | None = None
    source: Literal["All", "Original", "Generated"] = "All"


class SyncKind(_Strict):
    """One entry of Gatekeeper's Config `spec.sync.syncOnly`: a kind replicated into
    `data.inventory`."""

    group: str = ""
    version: str = Field(min_length=1)
    kind: str = Field(min_length=1)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class _SyncAlternative(_Strict):
    groups: list[str] = Field(max_length=MAX_SYNC_KINDS)
    versions: list[str] = Field(max_length=MAX_SYNC_KINDS)
    kinds: list[str] = Field(max_length=MAX_SYNC_KINDS)


_SYNC_REQUIREMENTS = TypeAdapter(list[list[_SyncAlternative]])


def check_match(value: Any) -> dict[str, Any]:
    """`value` when it is a well-formed `spec.match`; else ValueError with one line naming the
    first wrong field."""
    try:
        Match.model_validate(value)
    except ValidationError as exc:
        raise ValueError(f"spec.match {_first_error(exc)}") from None
    return dict(value)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                    for part in error["loc"]).lstrip(".")
    shown = orjson.dumps(error.get("input"), default=str).decode()
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    what = "unknown key" if error["type"] == "extra_forbidden" else str(
        error["msg"]).removeprefix("Value error, ")
    return f"{where or '(top)'}: {what} (got {shown})"


# ---------------------------------------------------------------------------- reading


def _documents(path: Path) -> list[Any]:
    try:
        raw = read_bounded_bytes(path, max_policy_file_bytes())
    except FileTooLarge:
        raise InputError("file too large", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=str(path)) from None
    return [doc for doc in load_yaml_documents(text, str(path)) if doc is not None]


def _get(node: Any, *keys: str) -> Any:
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _list(value: Any) -> list[Any]:
    """A YAML list, or [] for anything else (hostile shapes are read as absent)."""
    return list(value) if isinstance(value, list) else []


def _template_rego(target: Mapping[str, Any], file: str) -> tuple[str, list[Any]]:
    """The Rego source and libs of a target: inline, or its `code` entry for engine Rego."""
    if isinstance(target.get("rego"), str):
        return target["rego"], _libs(target.get("libs"), file)
    for code in _list(target.get("code")):
        if _get(code, "engine") == "Rego" and isinstance(_get(code, "source", "rego"), str):
            return code["source"]["rego"], _libs(_get(code, "source", "libs"), file)
    raise InputError(f"the {TARGET} target has no Rego (only Rego templates are imported)",
                     file=file)


def _libs(value: Any, file: str) -> list[Any]:
    """A target's `libs`: absent, or a list (Gatekeeper refuses anything else, so do we)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"libs must be a list of Rego texts, got {type(value).__name__}",
                         file=file)
    return list(value)


def read_template(path: Path) -> Template:
    file = str(path)
    docs = [d for d in _documents(path) if _get(d, "kind") == "ConstraintTemplate"]
    if len(docs) != 1:
        raise InputError("expected one ConstraintTemplate", file=file)
    doc = docs[0]
    if not str(doc.get("apiVersion") or "").startswith(TEMPLATE_API_GROUP):
        raise InputError(f"apiVersion {doc.get('apiVersion')!r} is not {TEMPLATE_API_GROUP}v1 "
                         "or v1beta1", file=file)
    kind = _get(doc, "spec", "crd", "spec", "names", "kind")
    name = _get(doc, "metadata", "name")
    targets = [t for t in _list(_get(doc, "spec", "targets")) if _get(t, "target") == TARGET]
    if not isinstance(kind, str) or not isinstance(name, str) or not targets:
        raise InputError(f"a ConstraintTemplate needs metadata.name, spec.crd.spec.names.kind "
                         f"and an {TARGET} target", file=file)
    if not _TEMPLATE_NAME.match(name):
        raise InputError(f"metadata.name {name[:64]!r} is not a lowercase DNS name", file=file)
    rego, libs = _template_rego(targets[0], file)
    if not all(isinstance(lib, str) for lib in libs):
        raise InputError("libs must be Rego texts", file=file)
    package = re.search(r"^\s*package\s+([\w.]+)", rego, re.MULTILINE)
    if package is None:
        raise InputError("the template's Rego has no package", file=file)
    title = _get(doc, "metadata", "annotations", "metadata.gatekeeper.sh/title")
    sync = sync_kinds(_get(doc, "metadata", "annotations", SYNC_ANNOTATION), file)
    return Template(name, kind, str(title or kind), rego, tuple(libs), package.group(1), sync)


def sync_kinds(annotation: Any, file: str) -> tuple[dict[str, str], ...]:
    """The kinds a template's `requires-sync-data` annotation names (a JSON list of
    requirements, each a list of `{groups, versions, kinds}` alternatives, the whole text
    possibly wrapped in quotes as the library writes it): every group × version × kind, since
    the webhook replicates them all."""
    if annotation is None:
        return ()
    try:
        requirements = _SYNC_REQUIREMENTS.validate_json(str(annotation).strip().strip('"'))
        found = {(group, version, kind)
                 for requirement in requirements for entry in requirement
                 for group in entry.groups for version in entry.versions
                 for kind in entry.kinds}
        kinds = [SyncKind(group=g, version=v, kind=k).model_dump() for g, v, k in sorted(found)]
    except ValidationError:
        raise InputError(f"annotation {SYNC_ANNOTATION} is not a JSON list of lists of "
                         "{groups, versions, kinds}", file=file) from None
    if len(kinds) > MAX_SYNC_KINDS:
        raise InputError(f"annotation {SYNC_ANNOTATION} names more than {MAX_SYNC_KINDS} kinds",
                         file=file)
    return tuple(kinds)


def read_constraints(paths: Sequence[Path], template: Template) -> list[Constraint]:
    found: list[Constraint] = []
    for path in paths:
        for doc in _documents(path):
            if _get(doc, "kind") != template.kind:
                raise InputError(f"expected a {template.kind} Constraint, got kind "
                                 f"{_get(doc, 'kind')!r}", file=str(path))
            found.append(_constraint(doc, str(path)))
            if len(found) > MAX_CONSTRAINTS:
                raise InputError(f"more than {MAX_CONSTRAINTS} Constraints", file=str(path))
    if not found:
        raise InputError(f"no {template.kind} Constraint given")
    return found


def _constraint(doc: Mapping[str, Any], file: str) -> Constraint:
    name = _get(doc, "metadata", "name")
    parameters = _get(doc, "spec", "parameters") or {}
    match = _get(doc, "spec", "match") or {}
    action = str(_get(doc, "spec", "enforcementAction") or "deny").lower()
    if not isinstance(name, str) or not name:
        raise InputError("a Constraint needs metadata.name", file=file)
    if not isinstance(parameters, Mapping) or not isinstance(match, Mapping):
        raise InputError("spec.parameters and spec.match must be mappings", file=file)
    try:
        check_match(_plain(match))
    except ValueError as exc:
        raise InputError(f"Constraint {name}: {exc}", file=file) from None
    if action not in _ENFORCEMENT:
        raise InputError(f"enforcementAction {action!r} (one of: {', '.join(_ENFORCEMENT)})",
                         file=file)
    return Constraint(name, _plain(parameters), _plain(match), _ENFORCEMENT[action])


def _plain(value: Any) -> Any:
    """LineDict/LineList as plain dicts and lists, for yaml.safe_dump."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


# ---------------------------------------------------------------------------- writing


def policy_document(template: Template, constraints: Sequence[Constraint],
                    modules: Sequence[str]) -> dict[str, Any]:
    return {"apiVersion": "gpuwarden.io/v1", "policies": [
        {
            "id": _ID_CHARS.sub("-", constraint.name.lower()).strip("-") or template.name,
            "title": f"{template.title} ({constraint.name})",
            "description": f"Gatekeeper {template.kind} constraint {constraint.name}, imported "
                           f"from ConstraintTemplate {template.name}.",
            "severity": "medium",
            "resources": ["workload", "other"],
            "parameters": constraint.parameters,
            "rego": {"module": list(modules), "package": template.package,
                     "input": "admission", "match": constraint.match,
                     **({"inventory": list(template.sync)} if template.sync else {})},
            "enforcement": {"plan": "off", "admission": constraint.enforcement,
                            "runtime": "audit"},
            "cost": "none",
        }
        for constraint in constraints
    ]}


def import_gatekeeper(template_path: Path, constraint_paths: Sequence[Path],
                      out_dir: Path) -> list[Path]:
    """Write the template's modules and the constraints' policy file under `out_dir`; the
    paths written."""
    template = read_template(template_path)
    constraints = read_constraints(constraint_paths, template)
    texts = {f"{template.name}.rego": template.rego}
    texts.update({f"{template.name}_lib{index}.rego": lib
                  for index, lib in enumerate(template.libs, 1)})
    document = policy_document(template, constraints, list(texts))
    texts[f"{template.name}.yaml"] = (
        f"# Imported from Gatekeeper ConstraintTemplate {template.name} by "
        "`gpuwarden policies import-gatekeeper`.\n"
        + yaml.safe_dump(document, sort_keys=False, width=100))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out_dir / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=str(out_dir)) from None
    return [out_dir / name for name in texts]


# ---------------------------------------------------------------------------- spec.match


def matches(match: Mapping[str, Any], obj: Mapping[str, Any], namespace: str | None,
            namespace_labels: Mapping[str, str] | None = None) -> bool:
    """Whether a Constraint's `spec.match` selects `obj` (in `namespace`, whose labels are
    `namespace_labels` when known)."""
    kind = str(obj.get("kind") or "")
    group = str(obj.get("apiVersion") or "v1").rpartition("/")[0]
    if "kinds" in match and not _kind_matches(match["kinds"], group, kind):
        return False
    if not _namespace_matches(match, namespace):
        return False
    if "name" in match and not _name_matches(match["name"], _get(obj, "metadata", "name")):
        return False
    labels = _labels(obj)
    if "labelSelector" in match and not selector_matches(match["labelSelector"], labels):
        return False
    if "namespaceSelector" in match:
        known = labels if kind == "Namespace" else namespace_labels
        if known is None or not selector_matches(match["namespaceSelector"], known):
            return False
    return True


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = _get(obj, "metadata", "labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _kind_matches(kinds: Any, group: str, kind: str) -> bool:
    for entry in kinds if isinstance(kinds, list) else []:
        groups = _get(entry, "apiGroups") or ["*"]
        names = _get(entry, "kinds") or ["*"]
        if ("*" in groups or group in groups) and ("*" in names or kind in names):
            return True
    return False


def _pattern_matches(patterns: Any, name: str) -> bool:
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1]))
               for p in patterns if isinstance(p, str)) if isinstance(patterns, list) else False


def _name_matches(pattern: Any, name: Any) -> bool:
    """Gatekeeper's `match.name`: exact, or a `*` at its start or end as a wildcard."""
    if not isinstance(pattern, str) or not isinstance(name, str):
        return False
    if pattern.startswith("*"):
        return name.endswith(pattern[1:])
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _namespace_matches(match: Mapping[str, Any], namespace: str | None) -> bool:
    scope = match.get("scope", "*")
    if (scope == "Namespaced" and not namespace) or (scope == "Cluster" and namespace):
        return False
    if not namespace:
        return True
    if "namespaces" in match and not _pattern_matches(match["namespaces"], namespace):
        return False
    return not _pattern_matches(match.get("excludedNamespaces"), namespace)


def selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector; an empty one selects everything."""
    if not isinstance(selector, Mapping):
        return False
    wanted = selector.get("matchLabels") or {}
    if not isinstance(wanted, Mapping) or any(labels.get(str(k)) != str(v)
                                              for k, v in wanted.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    return isinstance(expressions, list) and all(_expression_holds(e, labels)
                                                 for e in expressions)


def _expression_holds(expression: Any, labels: Mapping[str, str]) -> bool:
    key = str(_get(expression, "key"))
    operator = _get(expression, "operator")
    values = [str(v) for v in _get(expression, "values") or []]
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


# ---------------------------------------------------------------------------- judged objects


def judged_resource(match: Mapping[str, Any], resource: Resource) -> Resource | None:
    """The resource when `match` selects it; else, for a controller whose pod template makes a
    Pod that `match` selects, that Pod (Gatekeeper's expansion: a Deployment wrapping a pod a
    Pod constraint forbids is judged as that pod); else None."""
    labels = resource.namespace_labels
    source = match.get("source", "All")
    if source != "Generated" and matches(match, resource.raw, resource.namespace, labels):
        return resource
    pod = expanded_pod(resource.raw, resource.namespace) if source != "Original" else None
    if pod is not None and matches(match, pod, resource.namespace, labels):
        return resource.model_copy(update={"raw": pod, "kind": "Pod"})
    return None


def expanded_pod(obj: Mapping[str, Any], namespace: str | None) -> dict[str, Any] | None:
    """The Pod a controller's pod template makes (None for a Pod or an object without one)."""
    if obj.get("kind") == "Pod":
        return None
    path = pod_template_path(dict(obj))
    template = _get(obj, *path[:-1]) if path else None
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        return None
    metadata = dict(_get(template, "metadata") or {})
    if namespace:
        metadata.setdefault("namespace", namespace)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def judges_every_kind(policy: CompiledPolicy) -> bool:
    """A Rego policy reading the AdmissionReview that declares the `other` category: it judges
    any object admission receives (Namespaces, Services, Ingresses), not only GPU workloads."""
    spec = getattr(policy.rego, "spec", None)
    return Category.OTHER in policy.categories and getattr(spec, "input", None) == "admission"


# ---------------------------------------------------------------------------- data.inventory


def inventory_tree(kinds: Iterable[tuple[str, str, bool, Iterable[Mapping[str, Any]]]]
                   ) -> dict[str, Any]:
    """`data.inventory` in Gatekeeper's shape from (apiVersion, kind, namespaced, objects):
    `cluster[apiVersion][kind][name]` and `namespace[namespace][apiVersion][kind][name]`. An
    object without a string name is left out; a namespaced one without a namespace is filed
    under `default`."""
    cluster: dict[str, Any] = {}
    namespaced: dict[str, Any] = {}
    for api_version, kind, in_namespace, objects in kinds:
        for obj in objects:
            metadata = obj.get("metadata")
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            if not isinstance(name, str):
                continue
            namespace = metadata.get("namespace")  # type: ignore[union-attr]
            namespace = namespace if isinstance(namespace, str) and namespace else "default"
            root = namespaced.setdefault(namespace, {}) if in_namespace else cluster
            root.setdefault(api_version, {}).setdefault(kind, {})[name] = obj
    return {"cluster": cluster, "namespace": namespaced}


def object_resource(obj: Mapping[str, Any], namespace: str | None,
                    namespace_labels: Mapping[str, str] | None = None) -> Resource:
    """Any Kubernetes object as a resource of category `other`, for the Rego admission
    policies that judge every kind (Services, Ingresses, Namespaces)."""
    kind = str(obj.get("kind") or "")
    name = str(_get(obj, "metadata", "name") or _get(obj, "metadata", "generateName") or "")
    ident = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    return Resource(id=ident, provider="kubernetes", category=Category.OTHER, kind=kind,
                    name=name, namespace=namespace, raw=dict(obj),
                    namespace_labels=dict(namespace_labels or {}))
