"""Snapshot section `gcp: {projects: [{project, instances, disks}]}`: written from a scan's
estates, read back (shape-checked) into estates and normalized like a live scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.sources.gcp.normalizers import estate_resources
from engine.sources.gcp.readers import ProjectEstate
from engine.sources.gcp.shapes import SECTION_SHAPES, ProjectShape
from engine.sources.sections import SnapshotContext, check_shape, section


def gcp_snapshot(estates: Iterable[ProjectEstate]) -> dict[str, Any]:
    """The `gcp:` section of a snapshot bundle."""
    return {"projects": [{"project": e.project, "instances": e.instances, "disks": e.disks}
                         for e in estates]}


@section("gcp")
def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `gcp: {projects: [{project, instances, disks}]}`."""
    return estate_resources(_estates_from_section(value, ctx.file), ctx.catalog)


def _estates_from_section(value: Any, file: str) -> list[ProjectEstate]:
    if not isinstance(value, Mapping) or not isinstance(value.get("projects"), list):
        raise InputError("gcp must be a mapping with a 'projects' list", file=file)
    estates: list[ProjectEstate] = []
    for index, entry in enumerate(value["projects"]):
        where = f"gcp.projects[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("project"), Mapping):
            raise InputError(f"{where} needs a 'project' mapping", file=file)
        check_shape(ProjectShape, entry["project"], f"{where}.project", file)
        lists = {key: entry.get(key) or [] for key in SECTION_SHAPES}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise InputError(f"{where}.{key} must be a list of objects", file=file)
            for position, item in enumerate(items):
                check_shape(SECTION_SHAPES[key], item, f"{where}.{key}[{position}]", file)
        estates.append(ProjectEstate(dict(entry["project"]),
                                     [dict(i) for i in lists["instances"]],
                                     [dict(d) for d in lists["disks"]]))
    return estates
