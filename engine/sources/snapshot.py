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
from typing import Any

import orjson
from pydantic import ValidationError

from engine.catalog import Catalog
from engine.enrich import enrich
from engine.errors import InputError
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
    """Parse a bundle file (JSON or YAML) and check its header."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read snapshot: {exc.strerror or exc}", file=str(path)) from None
    if not data.strip():
        raise InputError("snapshot file is empty", file=str(path))
    try:
        bundle: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputError("snapshot is neither JSON nor UTF-8 YAML", file=str(path)) from None
        docs = load_yaml_documents(text, str(path))
        bundle = docs[0] if len(docs) == 1 else None
    if not isinstance(bundle, dict) or bundle.get("kind") != "Snapshot":
        raise InputError("not a gpuwarden snapshot (expected a mapping with kind: Snapshot)",
                         file=str(path))
    unknown = set(bundle) - _HEADER_KEYS - set(SECTIONS) - set(LAZY_SECTIONS)
    if unknown:
        known = ", ".join(sorted([*SECTIONS, *LAZY_SECTIONS]))
        raise InputError(f"unknown snapshot section {sorted(unknown)[0]!r} (sections: {known})",
                         file=str(path))
    return bundle


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
            found.extend(_reader(name)(bundle[name], ctx))
    return found


@section("terraform_plans")
def _plans(value: Any, ctx: SnapshotContext) -> list[Resource]:
    from engine.sources.terraform import plan_resources

    if not isinstance(value, list):
        raise InputError("terraform_plans must be a list of {name, plan}", file=ctx.file)
    found: list[Resource] = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("plan"), Mapping):
            raise InputError(f"terraform_plans[{index}] needs a 'plan' mapping", file=ctx.file)
        name = str(entry.get("name") or f"{ctx.file}#terraform_plans[{index}]")
        found.extend(plan_resources(dict(entry["plan"]), name, ctx.catalog))
    return found


@section("kubernetes")
def _kubernetes(value: Any, ctx: SnapshotContext) -> list[Resource]:
    from engine.sources.kubernetes_live import ClusterState, cluster_resources

    if not isinstance(value, Mapping) or not isinstance(value.get("objects", []), list):
        raise InputError("kubernetes must be a mapping with an 'objects' list", file=ctx.file)
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
            where = ".".join(str(p) for p in error["loc"])
            raise InputError(f"resources[{index}].{where}: {error['msg']}", file=ctx.file) from None
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
