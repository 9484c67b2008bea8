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

Each section is read by the reader its adapter registers (`engine.sources.sections`), so new
sources add a section without touching this module or its callers. This module reads the
bundle and registers the sections that belong to no adapter: `terraform_plans`, `resources`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from engine.core.catalog import Catalog
from engine.core.enrich import enrich
from engine.core.errors import InputError, printable
from engine.core.model import Category, Resource
from engine.core.yamltext import load_yaml_documents
from engine.inputfiles import (
    bounded_resource,
    check_nesting,
    identifier,
    read_input_bytes,
    tidy_document,
)
from engine.sharedfields import share_fields_set
from engine.sources.collected import Collected, ScanOptions, dump_snapshot
from engine.sources.members import Span, member_spans, parse_member
from engine.sources.sections import (
    SECTIONS,
    Count,
    Labels,
    ObjectShape,
    SnapshotContext,
    check_shape,
    section,
    section_reader,
)

__all__ = ["SECTIONS", "Count", "Labels", "ObjectShape", "SnapshotContext", "check_shape",
           "collect", "dump_snapshot", "load_snapshot_resources", "read_snapshot",
           "snapshot_resources"]

_HEADER_KEYS = {"apiVersion", "kind", "captured_at", "description"}
# A lean scan parses a bundle up to this size whole: its parse tree is small beside what the
# scan holds later, and finding where each section ends (`members`) costs about 4% of a
# 100,000-resource scan's CPU, for 30 MiB less at its peak.
_WHOLE_PARSE_BYTES = 64 * 2**20
# The sections later stages read: the telemetry join's readings, and the Kubernetes objects it
# finds pods and nodes in.
_JOINED_SECTIONS = ("telemetry", "kubernetes")
# The resources whose native object (`raw`) the telemetry join reads, and the fields it reads:
# it finds instances by their ids, DNS names and addresses (engine.telemetry.hosts.instance_keys;
# tests/test_snapshot_scale.py holds the two together).
_JOINED_BY_RAW = frozenset({Category.INSTANCE, Category.AUTOSCALING_GROUP})
_JOIN_RAW_PATHS = (("InstanceId",), ("PrivateDnsName",), ("PrivateIpAddress",), ("hostname",),
                   ("properties", "osProfile", "computerName"))


def read_snapshot(path: Path) -> dict[str, Any]:
    """Parse a bundle file (JSON or YAML) and check its header. The file is read and the
    bundle tidied within the bounds of `engine.inputfiles`."""
    return _checked_bundle(_parse_bundle(_bundle_bytes(path), str(path)), str(path))


def _bundle_bytes(path: Path) -> bytes:
    try:
        data = read_input_bytes(str(path), "snapshot")
    except OSError as exc:
        raise InputError(f"cannot read snapshot: {exc.strerror or exc}", file=str(path)) from None
    if not data.strip():
        raise InputError("snapshot file is empty", file=str(path))
    return data


def _checked_bundle(bundle: Any, file: str) -> dict[str, Any]:
    if not isinstance(bundle, dict) or bundle.get("kind") != "Snapshot":
        raise InputError("not a gpuwarden snapshot (expected a mapping with kind: Snapshot)",
                         file=file)
    unknown = set(bundle) - _HEADER_KEYS - set(SECTIONS)
    if unknown:
        known = ", ".join(sorted(SECTIONS))
        shown = printable(repr(sorted(unknown)[0]), 80)
        raise InputError(f"unknown snapshot section {shown} (sections: {known})", file=file)
    return bundle


class _Sections:
    """The sections of the bundle at `path`, each taken out once (`take`).

    A JSON bundle is parsed a section at a time as its sections are taken
    (`engine.sources.members`), and each section's text is let go once parsed, so one
    section's parse tree is held at a time rather than the whole bundle's. A bundle that is
    not plainly one JSON object, or whose header is wrong, is parsed whole as `read_snapshot`
    does. Errors are the whole parse's: a section that fails alone, or whose reader fails
    (`whole_verdict`), has the whole bundle parsed to say why.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.file = path, str(path)
        data = _bundle_bytes(path)
        spans = member_spans(data, _HEADER_KEYS | set(SECTIONS)) \
            if len(data) > _WHOLE_PARSE_BYTES else None
        self._texts: dict[str, bytes] = {}
        self._whole: dict[str, Any] | None = None
        if spans is None or not _header_holds(data, spans, self.file):
            self._whole = _checked_bundle(_parse_bundle(data, self.file), self.file)
        else:
            self._texts = {name: data[start:end] for name, (start, end) in spans.items()
                           if name in SECTIONS}

    def take(self, name: str) -> Any:
        """Section `name` (None when the bundle has none), no longer held here."""
        text = self._texts.pop(name, None)
        if self._whole is not None or text is None:
            return self._whole.pop(name, None) if self._whole is not None else None
        try:
            value = orjson.loads(text)
            del text
            check_nesting([value], self.file)  # the list stands for the bundle around it
        except (orjson.JSONDecodeError, InputError):
            self.whole_verdict()
            return self._whole.pop(name, None) if self._whole is not None else None
        return value

    def whole_verdict(self) -> None:
        """Parse the whole bundle, raising its error if it has one; the sections not taken
        yet are then taken from it (JSON only Python reads, read as YAML)."""
        if self._whole is None:
            self._whole = _checked_bundle(_parse_bundle(_bundle_bytes(self.path), self.file),
                                          self.file)
            self._texts.clear()


def _header_holds(data: bytes, spans: Mapping[str, Span], file: str) -> bool:
    """Whether the header `read_snapshot` checks is right: kind Snapshot, no unknown key, and
    header values that parse."""
    try:
        header = {key: parse_member(data, span) for key, span in spans.items()
                  if key in _HEADER_KEYS}
        _checked_bundle({**dict.fromkeys(spans), **header}, file)
        check_nesting(header, file)
    except (orjson.JSONDecodeError, InputError):
        return False
    return True


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


def snapshot_resources(bundle: Mapping[str, Any], ctx: SnapshotContext) -> list[Resource]:
    found: list[Resource] = []
    for name in SECTIONS:
        if bundle.get(name) is not None:
            found.extend(bounded_resource(r) for r in _read_section(name, bundle[name], ctx))
    return found


def _released_resources(sections: _Sections, ctx: SnapshotContext, *, keep_raw: bool
                        ) -> tuple[list[Resource], dict[str, Any]]:
    """`snapshot_resources`, taking each section out of the bundle as it is read:
    what its resources do not hold of it is let go before the next section is read (without
    `keep_raw`, their native objects too unless the telemetry join reads them), and each
    resource shares its class's field-names set (`engine.sharedfields`). Also returns the
    sections the join reads (`_JOINED_SECTIONS`)."""
    found: list[Resource] = []
    joined: dict[str, Any] = {}
    for name in SECTIONS:
        value = sections.take(name)
        if value is None:
            continue
        read = _read_taken(sections, name, value, ctx)
        if name in _JOINED_SECTIONS:
            joined[name] = join_view(name, value)
        del value  # each native goes once its resource has let go of it
        for resource in read:
            found.append(bounded := bounded_resource(resource))
            if not keep_raw and bounded.raw:
                bounded.raw = join_fields(bounded.raw) \
                    if bounded.category in _JOINED_BY_RAW else {}
            share_fields_set(bounded)
        del read
    return found, joined


def _read_taken(sections: _Sections, name: str, value: Any, ctx: SnapshotContext
                ) -> list[Resource]:
    try:
        return _read_section(name, value, ctx)
    except InputError:
        sections.whole_verdict()  # a bundle nested too deep says so first, as a whole
        raise


# What a reader raises on an object of a shape it did not expect.
_SHAPE_FAILURES = (AttributeError, LookupError, OverflowError, RecursionError, TypeError,
                   ValueError)


def _read_section(name: str, value: Any, ctx: SnapshotContext) -> list[Resource]:
    """A section's resources. Readers check the shapes they rely on and say what is wrong;
    this is the last resort for one they did not check: still one line, naming the section."""
    try:
        return section_reader(name)(value, ctx)
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


def join_view(name: str, value: Any) -> Any:
    """What the telemetry join reads of a section it reads (`_JOINED_SECTIONS`): of the
    Kubernetes objects, Nodes whole (hosts, their capacity) and the ownership of the others
    (`minimal_owner`); other sections whole."""
    if name != "kubernetes" or not isinstance(value, Mapping) \
            or not isinstance(value.get("objects"), list):
        return value
    from engine.sources.kubernetes.ownership import minimal_owner

    objects = [obj if obj.get("kind") == "Node" else minimal_owner(obj)
               for obj in value["objects"] if isinstance(obj, Mapping)]
    return {**value, "objects": objects}


def join_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a native object the telemetry join reads (`_JOIN_RAW_PATHS`)."""
    kept: dict[str, Any] = {}
    for path in _JOIN_RAW_PATHS:
        value: Any = raw
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None:
            holder = kept
            for key in path[:-1]:
                holder = holder.setdefault(key, {})
            holder[path[-1]] = value
    return kept


def load_snapshot_resources(path: Path, catalog: Catalog) -> list[Resource]:
    return snapshot_resources(read_snapshot(path), SnapshotContext(str(path), catalog))


def collect(arg: str | None, options: ScanOptions, catalog: Catalog) -> Collected:
    """`--source snapshot:FILE`."""
    if not arg:
        raise InputError("--source snapshot needs a file: snapshot:FILE")
    path = Path(arg)
    ctx = SnapshotContext(str(path), catalog)
    if options.keep_natives:
        bundle = read_snapshot(path)
        sections = {k: v for k, v in bundle.items() if k not in _HEADER_KEYS}
        return Collected(resources=snapshot_resources(bundle, ctx), snapshot=sections)
    resources, joined = _released_resources(_Sections(path), ctx,
                                            keep_raw=options.keep_raw)
    return Collected(resources=resources, snapshot=joined)
