"""Snapshot section `gcp: {projects: [{project, instances, disks, clusters}]}`: written from a
scan's estates, read back (shape-checked) into estates and normalized like a live scan.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.core.model import Resource
from engine.sources.gcp.estate import estate_resources
from engine.sources.gcp.machine_types import learned_catalog
from engine.sources.gcp.readers import ProjectEstate
from engine.sources.gcp.shapes import SECTION_SHAPES, ProjectShape
from engine.sources.sections import SnapshotContext, checked_scopes, section


def gcp_snapshot(estates: Iterable[ProjectEstate],
                 machine_types: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `gcp:` section of a snapshot bundle (with the machine types asked at the runtime
    door, so a replay knows them too)."""
    section: dict[str, Any] = {"projects": [_project_entry(e) for e in estates]}
    if machine_types:
        section["machine_types"] = machine_types
    return section


def _project_entry(estate: ProjectEstate) -> dict[str, Any]:
    entry = {"project": estate.project, "instances": estate.instances, "disks": estate.disks}
    if estate.clusters:  # GKE; left out when none, so a bundle without GKE reads as before
        entry["clusters"] = estate.clusters
    return entry


@section("gcp")
def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `gcp: {projects: [{project, instances, disks, clusters}]}`."""
    estates = _estates_from_section(value, ctx.file)
    return estate_resources(estates, learned_catalog(ctx.catalog, value.get("machine_types")))


def _estates_from_section(value: Any, file: str) -> list[ProjectEstate]:
    entries = checked_scopes(value, section="gcp", scopes="projects", scope="project",
                             scope_shape=ProjectShape, list_shapes=SECTION_SHAPES, file=file)
    return [ProjectEstate(project, lists["instances"], lists["disks"], lists["clusters"])
            for project, lists in entries]
