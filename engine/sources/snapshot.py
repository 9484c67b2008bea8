"""Snapshot bundles: exported state (plans, Kubernetes objects, normalized resources) in one file.

A bundle is a JSON or YAML mapping:

    apiVersion: gpuwarden.io/v1
    kind: Snapshot
    captured_at: 2026-11-30T08:00:00Z       # optional
    terraform_plans:                        # `terraform show -json` documents
      - {name: network.tfplan.json, plan: {...}}
    kubernetes:                             # objects as the API returns them
      cluster: prod-eu
      objects: [Namespace, Deployment, Job, Pod, ...]
    resources: [...]                        # already-normalized Resource objects

Each section is read by the adapter registered for it, so new sources add a section without
touching this module's callers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from engine.catalog import Catalog
from engine.enrich import enrich
from engine.errors import InputError, printable
from engine.inputfiles import bounded_resource, identifier, read_input_bytes, tidy_document
from engine.model import Resource
from engine.sources.registry import Collected, ScanOptions
from engine.yamlsource import load_yaml_documents

SectionReader = Callable[[Any, "SnapshotContext"], list[Resource]]
SECTIONS: dict[str, SectionReader] = {}
# Sections whose reader lives with its adapter: "module:function", imported when present.
LAZY_SECTIONS: dict[str, str] = {
    "aws": "engine.sources.aws:read_snapshot_section",
    "gcp": "engine.sources.gcp:read_snapshot_section",
    "azure": "engine.sources.azure:read_snapshot_section",
    "telemetry": "engine.telemetry.snapshot:read_section",
}
_HEADER_KEYS = {"apiVersion", "kind", "captured_at", "description"}


class ObjectShape(BaseModel):
    """The fields of an API object in a snapshot section that its reader uses, with the types
    it expects; other fields are allowed and ignored. Checked (`check_shape`) before reading,
    so a hand-edited bundle fails with the field's path rather than deep in a normalizer."""

    model_config = ConfigDict(extra="allow")


Labels = dict[str, str | int | float | bool | None]
_SHAPE_PROBLEMS = {
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
}
# a count as the APIs serve it: a JSON integer (not a string, boolean or float), within reason
Count = Annotated[int, Strict(), Field(ge=0, le=1_000_000)]


def check_shape(shape: type[ObjectShape], obj: Any, where: str, file: str) -> None:
    """Raise `InputError` at `where` (`gcp.projects[0].instances[2]`) unless `obj` fits."""
    try:
        shape.model_validate(obj)
    except ValidationError as exc:
        error = exc.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        problem = _SHAPE_PROBLEMS.get(error["type"], error["msg"])
        raise InputError(f"{where}{printable(path, 80)}: {problem}", file=file) from None


@dataclass(frozen=True, slots=True)
class SnapshotContext:
    file: str
    catalog: Catalog


def section(name: str) -> Callable[[SectionReader], SectionReader]:
    def register(reader: SectionReader) -> SectionReader:
        SECTIONS[name] = reader
        return reader

    return register


def read_snapshot(path: Path) -> dict[str, Any]:
    """Parse a bundle file (JSON or YAML) and check its header. The file is read and the
    bundle tidied within the bounds of `engine.inputfiles`."""
    try:
        data = read_input_bytes(str(path), "snapshot")
    except OSError as exc:
        raise InputError(f"cannot read snapshot: {exc.strerror or exc}", file=str(path)) from None
    if not data.strip():
        raise InputError("snapshot file is empty", file=str(path))
    bundle = _parse_bundle(data, str(path))
    if not isinstance(bundle, dict) or bundle.get("kind") != "Snapshot":
        raise InputError("not a gpuwarden snapshot (expected a mapping with kind: Snapshot)",
                         file=str(path))
    unknown = set(bundle) - _HEADER_KEYS - set(SECTIONS) - set(LAZY_SECTIONS)
    if unknown:
        known = ", ".join(sorted([*SECTIONS, *LAZY_SECTIONS]))
        shown = printable(repr(sorted(unknown)[0]), 80)
        raise InputError(f"unknown snapshot section {shown} (sections: {known})", file=str(path))
    return bundle


def _parse_bundle(data: bytes, file: str) -> Any:
    """JSON through orjson; anything else (YAML, or JSON only Python reads) through PyYAML."""
    try:
        return tidy_document(orjson.loads(data), file, len(data), from_orjson=True)
    except orjson.JSONDecodeError:
        pass
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("snapshot is neither JSON nor UTF-8 YAML", file=file) from None
    try:
        docs = load_yaml_documents(text, file)
    except RecursionError:
        raise InputError("snapshot is nested too deeply", file=file) from None
    except ValueError:  # an integer too long to convert (sys.int_info) as a value or a key
        raise InputError("snapshot holds a number too long to read", file=file) from None
    return tidy_document(docs[0], file, len(data)) if len(docs) == 1 else None


def _reader(name: str) -> SectionReader:
    if name in SECTIONS:
        return SECTIONS[name]
    module_name, _, function = LAZY_SECTIONS[name].partition(":")
    reader: SectionReader = getattr(importlib.import_module(module_name), function)
    return reader


def snapshot_resources(bundle: Mapping[str, Any], ctx: SnapshotContext) -> list[Resource]:
    found: list[Resource] = []
    for name in [*SECTIONS, *LAZY_SECTIONS]:
        if bundle.get(name) is not None:
            found.extend(bounded_resource(r) for r in _read_section(name, bundle[name], ctx))
    return found


# What a reader raises on an object of a shape it did not expect.
_SHAPE_FAILURES = (AttributeError, LookupError, OverflowError, RecursionError, TypeError,
                   ValueError)


def _read_section(name: str, value: Any, ctx: SnapshotContext) -> list[Resource]:
    """A section's resources. Readers check the shapes they rely on and say what is wrong;
    this is the last resort for one they did not check: still one line, naming the section."""
    try:
        return _reader(name)(value, ctx)
    except _SHAPE_FAILURES as exc:
        detail = printable(f"{type(exc).__name__}: {exc}", 120)
        raise InputError(f"{name}: an object of unexpected shape ({detail})",
                         file=ctx.file) from None


@section("terraform_plans")
def _plans(value: Any, ctx: SnapshotContext) -> list[Resource]:
    from engine.sources.terraform import plan_resources

    if not isinstance(value, list):
        raise InputError("terraform_plans must be a list of {name, plan}", file=ctx.file)
    found: list[Resource] = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("plan"), Mapping):
            raise InputError(f"terraform_plans[{index}] needs a 'plan' mapping", file=ctx.file)
        name = identifier(str(entry.get("name") or f"{ctx.file}#terraform_plans[{index}]"))
        found.extend(plan_resources(dict(entry["plan"]), name, ctx.catalog))
    return found


class _KubernetesMetadata(ObjectShape):
    name: str | None = None
    namespace: str | None = None
    labels: Labels | None = None
    annotations: Labels | None = None


class _KubernetesObject(ObjectShape):
    apiVersion: str | None = None
    kind: str | None = None
    metadata: _KubernetesMetadata | None = None
    spec: dict[str, Any] | None = None


@section("kubernetes")
def _kubernetes(value: Any, ctx: SnapshotContext) -> list[Resource]:
    from engine.sources.kubernetes_live import ClusterState, cluster_resources

    if not isinstance(value, Mapping) or not isinstance(value.get("objects", []), list):
        raise InputError("kubernetes must be a mapping with an 'objects' list", file=ctx.file)
    for index, obj in enumerate(value.get("objects", [])):
        if isinstance(obj, Mapping):
            check_shape(_KubernetesObject, obj, f"kubernetes.objects[{index}]", ctx.file)
    objects = [dict(obj) for obj in value.get("objects", []) if isinstance(obj, Mapping)]
    cluster = value.get("cluster")
    state = ClusterState(
        cluster=str(cluster) if cluster else None,
        namespaces=[obj for obj in objects if obj.get("kind") == "Namespace"],
        nodes=[obj for obj in objects if obj.get("kind") == "Node"],
        workloads=[obj for obj in objects if obj.get("kind") not in ("Namespace", "Node")],
    )
    return cluster_resources(state, ctx.catalog)


@section("resources")
def _normalized(value: Any, ctx: SnapshotContext) -> list[Resource]:
    if not isinstance(value, list):
        raise InputError("resources must be a list of normalized resources", file=ctx.file)
    found: list[Resource] = []
    for index, item in enumerate(value):
        try:
            found.append(enrich(Resource.model_validate(item), ctx.catalog))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = printable(".".join(str(p) for p in error["loc"]), 80)
            raise InputError(f"resources[{index}].{where}: {printable(error['msg'])}",
                             file=ctx.file) from None
    return found


def load_snapshot_resources(path: Path, catalog: Catalog) -> list[Resource]:
    return snapshot_resources(read_snapshot(path), SnapshotContext(str(path), catalog))


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source snapshot:FILE`."""
    if not arg:
        raise InputError("--source snapshot needs a file: snapshot:FILE")
    path = Path(arg)
    bundle = read_snapshot(path)
    sections = {k: v for k, v in bundle.items() if k not in _HEADER_KEYS}
    return Collected(resources=snapshot_resources(bundle, SnapshotContext(str(path), catalog)),
                     snapshot=sections)


def dump_snapshot(bundle: Mapping[str, Any]) -> bytes:
    return orjson.dumps(bundle, option=orjson.OPT_INDENT_2)
