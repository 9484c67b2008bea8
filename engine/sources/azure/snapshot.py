"""Snapshot section `azure: {subscriptions: [{subscription, virtual_machines, disks,
managed_clusters}]}`: written from a scan's estates, read back (shape-checked) into estates and
normalized like a live scan.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine.core.model import Resource
from engine.sources.azure.normalizers import estate_resources
from engine.sources.azure.readers import SubscriptionEstate
from engine.sources.azure.shapes import SECTION_LISTS, SECTION_SHAPES, SubscriptionShape
from engine.sources.azure.vm_sizes import learned_catalog
from engine.sources.sections import SnapshotContext, checked_scopes, section


def azure_snapshot(estates: Iterable[SubscriptionEstate],
                   vm_sizes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `azure:` section of a snapshot bundle (with the VM sizes asked at the runtime door,
    so a replay knows them too)."""
    section: dict[str, Any] = {
        "subscriptions": [{"subscription": e.subscription,
                           "virtual_machines": e.virtual_machines, "disks": e.disks,
                           "managed_clusters": e.managed_clusters} for e in estates]}
    if vm_sizes:
        section["vm_sizes"] = vm_sizes
    return section


@section("azure")
def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `azure: {subscriptions: [{subscription, virtual_machines, disks,
    managed_clusters}]}`."""
    estates = _estates_from_section(value, ctx.file)
    return estate_resources(estates, learned_catalog(ctx.catalog, value.get("vm_sizes")))


def _estates_from_section(value: Any, file: str) -> list[SubscriptionEstate]:
    entries = checked_scopes(value, section="azure", scopes="subscriptions",
                             scope="subscription", scope_shape=SubscriptionShape,
                             list_shapes=SECTION_SHAPES, file=file)
    return [SubscriptionEstate(subscription, *(lists[key] for key in SECTION_LISTS))
            for subscription, lists in entries]
