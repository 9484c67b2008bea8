"""Snapshot sections: which module reads each top-level key of a bundle, and the tools readers
share (the reading context, and shape checks of the API objects they read).

A reader registers itself where it lives, with `@section(NAME)`, the way Cloud Custodian's
resources register with their registry. `SECTIONS` lists every section, in reading order, with
the module whose import registers its reader; a bundle imports only the modules of the sections
it holds, so a Kubernetes snapshot never imports the GCP adapter. `module:function` names a
reader function that its module does not register itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from engine.core.catalog import Catalog
from engine.core.errors import InputError, printable
from engine.core.model import Resource

SECTIONS: dict[str, str] = {
    "terraform_plans": "engine.sources.snapshot",
    "kubernetes": "engine.sources.kubernetes.snapshot",
    "resources": "engine.sources.snapshot",
    "aws": "engine.sources.aws:read_snapshot_section",
    "gcp": "engine.sources.gcp.snapshot",
    "azure": "engine.sources.azure.snapshot",
    "telemetry": "engine.telemetry.snapshot:read_section",
}


@dataclass(frozen=True, slots=True)
class SnapshotContext:
    file: str
    catalog: Catalog


SectionReader = Callable[[Any, SnapshotContext], list[Resource]]
_READERS: dict[str, SectionReader] = {}


def section(name: str) -> Callable[[SectionReader], SectionReader]:
    """Register the decorated function as the reader of section `name` (listed in SECTIONS)."""
    if name not in SECTIONS:
        raise ValueError(f"snapshot section {name!r} is not listed in SECTIONS")

    def register(reader: SectionReader) -> SectionReader:
        _READERS[name] = reader
        return reader

    return register


def section_reader(name: str) -> SectionReader:
    """The reader of a listed section, importing the module that registers it."""
    if name not in _READERS:
        module_name, _, function = SECTIONS[name].partition(":")
        module = importlib.import_module(module_name)
        if function:
            _READERS[name] = getattr(module, function)
    return _READERS[name]


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


ScopeEntry = tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]


def checked_scopes(value: Any, *, section: str, scopes: str, scope: str,
                   scope_shape: type[ObjectShape], list_shapes: Mapping[str, type[ObjectShape]],
                   file: str) -> list[ScopeEntry]:
    """The entries of a cloud section `{<scopes>: [{<scope>: {...}, <list>: [...], ...}]}`
    (`gcp: {projects: [{project, instances, disks}]}`), every object shape-checked: each entry's
    scope object and its lists by key. `InputError` naming the first misfit."""
    if not isinstance(value, Mapping) or not isinstance(value.get(scopes), list):
        raise InputError(f"{section} must be a mapping with a '{scopes}' list", file=file)
    entries: list[ScopeEntry] = []
    for index, entry in enumerate(value[scopes]):
        where = f"{section}.{scopes}[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get(scope), Mapping):
            raise InputError(f"{where} needs a '{scope}' mapping", file=file)
        check_shape(scope_shape, entry[scope], f"{where}.{scope}", file)
        lists = {key: entry.get(key) or [] for key in list_shapes}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise InputError(f"{where}.{key} must be a list of objects", file=file)
            for position, item in enumerate(items):
                check_shape(list_shapes[key], item, f"{where}.{key}[{position}]", file)
        entries.append((dict(entry[scope]),
                         {key: [dict(i) for i in items] for key, items in lists.items()}))
    return entries
