"""Kubernetes manifests on disk, for `gpuwarden check-manifests`: the objects of files,
directories and standard input, each remembering its file and line, turned into the resources
the admission webhook would judge.

Every file goes through the bounded reader (`engine.inputfiles`: regular files, size cap) and
the bounded YAML loader (`engine.core.yamltext`: nesting, alias expansion, integer size), so a
hostile manifest is one `InputError`. JSON is read by the same loader (JSON is YAML), which
keeps line numbers. `kind: List` and `<Kind>List` documents are flattened; their items keep
their own lines.

An object that asks for accelerators (an accelerator resource under `limits`/`requests` or a DRA
claim, anywhere in it) is never passed silently: when the Kubernetes adapter does not turn it
into a workload, or reads it as one without GPUs, its GPU is marked unknown, so every policy
that reads GPUs says `unknown` for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.catalog import Catalog
from engine.core.errors import InputError, printable
from engine.core.model import Category, Resource, SourceLocation, State
from engine.core.yamltext import line_of, load_yaml_documents
from engine.inputfiles import bounded_resource, read_input_bytes, tidy_document
from engine.sources.kubernetes import PROVIDER, workload_resource
from engine.sources.kubernetes.dra import ClaimIndex, claim_index

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"
MAX_FILES = 10_000  # per run: a directory walk that finds more is refused, not truncated
MAX_OBJECTS = 100_000
MAX_LIST_DEPTH = 8  # a List of Lists ... of items
ACCELERATOR_PREFIXES = ("nvidia.com/", "amd.com/gpu", "gpu.intel.com/", "habana.ai/",
                        "aws.amazon.com/neuron", "google.com/tpu")
DRA_CLAIM_KEYS = frozenset({"resourceClaims", "resourceClaimTemplateName", "resourceClaimName"})
UNREAD_GPU = "gpu"  # the field marked unknown on an object that asks for GPUs in a way not read
MAX_SCAN_NODES = 200_000
RESOURCE_MAPS = frozenset({"limits", "requests"})


@dataclass(frozen=True, slots=True)
class Manifest:
    """One Kubernetes object and where it was written."""

    obj: dict[str, Any]
    file: str
    line: int | None

    @property
    def kind(self) -> str | None:
        kind = self.obj.get("kind")
        return kind if isinstance(kind, str) else None


# ---------------------------------------------------------------------------------- reading


def manifest_files(paths: Sequence[str]) -> list[str]:
    """The files `paths` name: files as given, directories walked for *.yaml/*.yml/*.json
    (sorted, hidden entries skipped, symlinked directories not followed), `-` as is."""
    files: list[str] = []
    for path in paths:
        if path != STDIN and os.path.isdir(path):
            files.extend(_walk(path))
        else:
            files.append(path)
        if len(files) > MAX_FILES:
            raise InputError(f"more than {MAX_FILES} manifest files", file=printable(path))
    if files.count(STDIN) > 1:
        raise InputError("standard input (-) can be read only once")
    return files


def _walk(directory: str) -> Iterator[str]:
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and name.lower().endswith(MANIFEST_SUFFIXES):
                yield os.path.join(root, name)


def read_manifests(paths: Sequence[str]) -> list[Manifest]:
    """Every Kubernetes object in `paths`, in order; InputError on the first bad file."""
    manifests: list[Manifest] = []
    for file in manifest_files(paths):
        manifests.extend(read_manifest_file(file))
        if len(manifests) > MAX_OBJECTS:
            raise InputError(f"more than {MAX_OBJECTS} Kubernetes objects")
    return manifests


def read_manifest_file(path: str) -> list[Manifest]:
    shown = STDIN_NAME if path == STDIN else display_path(path)
    text = _read_text(path, shown)
    manifests: list[Manifest] = []
    for document in load_yaml_documents(text, shown):
        document = tidy_document(document, shown, len(text))
        if not isinstance(document, dict):
            raise InputError("expected a Kubernetes object (a mapping with kind), got "
                             f"{_shape(document)}", file=shown, line=line_of(document))
        manifests.extend(_flatten(document, shown, 0))
    return manifests


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else f"a {type(value).__name__} value"


def _read_text(path: str, shown: str) -> str:
    try:
        data = read_input_bytes(path, "manifest", shown, stdin=True)
    except FileNotFoundError:
        raise InputError("cannot read manifest: no such file", file=shown) from None
    except PermissionError:
        raise InputError("cannot read manifest: permission denied", file=shown) from None
    except OSError as exc:
        raise InputError(f"cannot read manifest: {exc.strerror or exc}", file=shown) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read manifest: not UTF-8 ({exc.reason} at byte {exc.start})",
                         file=shown) from None


def _flatten(obj: dict[str, Any], file: str, depth: int) -> Iterator[Manifest]:
    """The object, or the items of a `List` / `<Kind>List` (an item without kind gets the
    list's item kind, as the API server leaves it out)."""
    kind, items = obj.get("kind"), obj.get("items")
    if not (isinstance(kind, str) and kind.endswith("List") and isinstance(items, list)):
        yield Manifest(obj, file, line_of(obj))
        return
    if depth >= MAX_LIST_DEPTH:
        raise InputError(f"Lists nested more than {MAX_LIST_DEPTH} deep", file=file,
                         line=line_of(obj))
    item_kind = kind[: -len("List")]
    for item in items:
        if not isinstance(item, dict):
            continue
        if item_kind and "kind" not in item:
            item["kind"] = item_kind
            if isinstance(obj.get("apiVersion"), str):
                item.setdefault("apiVersion", obj["apiVersion"])
        yield from _flatten(item, file, depth + 1)


def display_path(path: str) -> str:
    """A path as reports name it: relative to the working directory when inside it."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path


# ---------------------------------------------------------------------------- namespaces


def namespace_labels_in(manifests: Sequence[Manifest]) -> dict[str, dict[str, str]]:
    """Labels of the Namespace objects among the manifests, by namespace name."""
    labels: dict[str, dict[str, str]] = {}
    for manifest in manifests:
        if manifest.kind != "Namespace":
            continue
        metadata = _mapping(manifest.obj.get("metadata"))
        name = metadata.get("name")
        if isinstance(name, str) and name:
            labels[name] = _string_map(metadata.get("labels"))
    return labels


def read_namespace_labels(path: str) -> dict[str, dict[str, str]]:
    """`--namespace-labels FILE`: a YAML (or JSON) mapping namespace → {label: value}."""
    shown = STDIN_NAME if path == STDIN else display_path(path)
    text = _read_text(path, shown)
    documents = load_yaml_documents(text, shown)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise InputError("expected one mapping of namespace to labels", file=shown)
    result: dict[str, dict[str, str]] = {}
    for name, labels in documents[0].items():
        if not isinstance(name, str) or not isinstance(labels, dict | type(None)):
            raise InputError(f"namespace {printable(str(name))!r}: expected a mapping of "
                             "label to value", file=shown, line=line_of(documents[0], str(name)))
        bad = [k for k, v in (labels or {}).items() if not isinstance(v, str | int | float | bool)]
        if bad:
            raise InputError(f"namespace {printable(name)!r}: label {printable(str(bad[0]))!r} "
                             "is not a scalar", file=shown, line=line_of(labels))
        result[name] = {str(k): _label_value(v) for k, v in (labels or {}).items()}
    return result


def _label_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ---------------------------------------------------------------------------- resources


def admission_resources(manifests: Sequence[Manifest], catalog: Catalog,
                        namespace_labels: Mapping[str, Mapping[str, str]]) -> list[Resource]:
    """The resources the admission webhook would judge (a CREATE of each object), each
    pointing at its file and line."""
    resources: list[Resource] = []
    claims = claim_index(manifest.obj for manifest in manifests)  # DRA claims among the inputs
    for manifest in manifests:
        namespace = _namespace(manifest.obj) or "default"
        resource = admission_resource(manifest, catalog, namespace_labels.get(namespace, {}),
                                      claims)
        if resource is not None:
            resources.append(bounded_resource(_located(resource, manifest)))
    return resources


def _located(resource: Resource, manifest: Manifest) -> Resource:
    """The resource pointing at its file and line; standard input is no file a report can
    point at (SARIF names the object only)."""
    if manifest.file == STDIN_NAME:
        return resource
    location = SourceLocation(file=manifest.file, line=manifest.line)
    return resource.model_copy(update={"location": location})


def admission_resource(manifest: Manifest, catalog: Catalog,
                       namespace_labels: Mapping[str, str],
                       claims: ClaimIndex | None = None) -> Resource | None:
    """The adapter's workload for the object (`claims`: the DRA claims and claim templates
    its pods may name); for one that asks for accelerators the adapter does not read (no
    workload, or one without GPUs), a workload whose GPU is unknown."""
    labels = dict(namespace_labels)
    resource = workload_resource(manifest.obj, labels, catalog=catalog, state=State.PLANNED,
                                 claims=claims)
    if resource is not None and resource.has_gpu:
        return resource
    if not requests_accelerators(manifest.obj):
        return resource
    if resource is None:
        return unread_gpu_workload(manifest, labels)
    return resource.model_copy(update={"unknown": resource.unknown | {UNREAD_GPU}})


def requests_accelerators(obj: Any) -> bool:
    """Whether the object asks for accelerators anywhere in it: a non-zero accelerator
    resource (`nvidia.com/gpu`, `amd.com/gpu`, ...) under a `limits` or `requests` mapping, or a
    DRA claim. Labels and selectors that merely name GPUs do not count."""
    pending: list[tuple[str | None, Any]] = [(None, obj)]
    seen = 0
    while pending and seen < MAX_SCAN_NODES:
        parent, node = pending.pop()
        seen += 1
        if isinstance(node, dict):
            for key, value in node.items():
                if _asks_for_accelerator(parent, key, value):
                    return True
                pending.append((key if isinstance(key, str) else None, value))
        elif isinstance(node, list):
            pending.extend((parent, item) for item in node)
    return False


def _asks_for_accelerator(parent: str | None, key: Any, value: Any) -> bool:
    if not isinstance(key, str):
        return False
    if key in DRA_CLAIM_KEYS:
        return bool(value)
    return (parent in RESOURCE_MAPS and key.startswith(ACCELERATOR_PREFIXES)
            and value not in (0, "0", None, ""))


def unread_gpu_workload(manifest: Manifest, namespace_labels: Mapping[str, str]) -> Resource:
    """A workload for an object that asks for accelerators in a shape not read: its GPU is
    unknown, so GPU policies give `unknown` rather than a silent pass."""
    metadata = _mapping(manifest.obj.get("metadata"))
    kind = manifest.kind or "<no kind>"
    name = _text(metadata.get("name")) or _text(metadata.get("generateName")) or "<unnamed>"
    namespace = _namespace(manifest.obj) or "default"
    return Resource(
        provider=PROVIDER,
        kind=kind,
        category=Category.WORKLOAD,
        id=f"{kind}/{namespace}/{name}",
        name=name,
        namespace=namespace,
        tags=_string_map(metadata.get("labels")),
        annotations=_string_map(metadata.get("annotations")),
        namespace_labels=dict(namespace_labels),
        state=State.PLANNED,
        unknown=frozenset({UNREAD_GPU, "count", "workload"}),
    )


def _namespace(obj: dict[str, Any]) -> str | None:
    return _text(_mapping(obj.get("metadata")).get("namespace"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _string_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in _mapping(value).items() if isinstance(k, str) and isinstance(v, str)}
