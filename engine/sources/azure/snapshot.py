"""Snapshot section `azure: {subscriptions: [{subscription, virtual_machines, disks,
managed_clusters}]}`: written from a scan's estates, read back (shape-checked) into estates and
normalized like a live scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.sources.azure.normalizers import estate_resources
from engine.sources.azure.readers import SubscriptionEstate
from engine.sources.azure.shapes import SECTION_LISTS, SECTION_SHAPES, SubscriptionShape
from engine.sources.sections import SnapshotContext, check_shape, section


def azure_snapshot(estates: Iterable[SubscriptionEstate]) -> dict[str, Any]:
    """The `azure:` section of a snapshot bundle."""
    return {"subscriptions": [{"subscription": e.subscription,
                               "virtual_machines": e.virtual_machines, "disks": e.disks,
                               "managed_clusters": e.managed_clusters} for e in estates]}


@section("azure")
def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """Snapshot section `azure: {subscriptions: [{subscription, virtual_machines, disks,
    managed_clusters}]}`."""
    return estate_resources(_estates_from_section(value, ctx.file), ctx.catalog)


def _estates_from_section(value: Any, file: str) -> list[SubscriptionEstate]:
    if not isinstance(value, Mapping) or not isinstance(value.get("subscriptions"), list):
        raise InputError("azure must be a mapping with a 'subscriptions' list", file=file)
    estates: list[SubscriptionEstate] = []
    for index, entry in enumerate(value["subscriptions"]):
        where = f"azure.subscriptions[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("subscription"), Mapping):
            raise InputError(f"{where} needs a 'subscription' mapping", file=file)
        check_shape(SubscriptionShape, entry["subscription"], f"{where}.subscription", file)
        lists = {key: entry.get(key) or [] for key in SECTION_LISTS}
        for key, items in lists.items():
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise InputError(f"{where}.{key} must be a list of objects", file=file)
            for position, item in enumerate(items):
                check_shape(SECTION_SHAPES[key], item, f"{where}.{key}[{position}]", file)
        estates.append(SubscriptionEstate(
            dict(entry["subscription"]), *([dict(i) for i in lists[k]] for k in SECTION_LISTS)))
    return estates
