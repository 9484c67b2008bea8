"""Building `Resource` models from a planned change: the resource itself and its disks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.core.model import Category, Resource, State
from engine.sources.terraform.attributes import AttrPath, Attrs
from engine.sources.terraform.plan_index import PlannedChange
from engine.sources.terraform.readers import any_key_set, mark_key


def new_resource(
    change: PlannedChange,
    category: Category,
    provider: str,
    unknown: Iterable[str],
    **fields: Any,
) -> Resource:
    """A PLANNED resource of `change`; kind, id, name and raw default to the change's own."""
    fields.setdefault("kind", change.type)
    fields.setdefault("id", change.address)
    fields.setdefault("name", fields["id"])
    fields.setdefault("raw", change.raw)
    return Resource(
        provider=provider,
        category=category,
        state=State.PLANNED,
        unknown=frozenset(unknown),
        **fields,
    )


def new_volume(
    change: PlannedChange,
    parent: Resource,
    block_path: str,
    block: Attrs,
    *,
    encrypted: bool | None,
    customer_key: bool | None,
    unknown: Iterable[str],
    extra_tags: Mapping[str, str] | None = None,
) -> Resource:
    """A disk of `parent` with its own encryption settings, as a VOLUME resource.

    It carries its parent's tags (an exemption on an instance covers its disks).
    """
    tag_unknowns = {u for u in parent.unknown if u == "tags" or u.startswith("tags.")}
    return new_resource(
        change,
        Category.VOLUME,
        parent.provider,
        {*unknown, *tag_unknowns},
        kind=f"{change.type}.{block_path.split('[', 1)[0]}",
        id=f"{change.address}.{block_path}",
        region=parent.region,
        cluster=parent.cluster,
        tags={**parent.tags, **(extra_tags or {})},
        count=parent.count,
        encrypted=encrypted,
        customer_key=customer_key,
        raw=block.value if isinstance(block.value, dict) else {},
    )


def platform_encrypted_disk(
    change: PlannedChange, parent: Resource, block_path: str, disk: Attrs, *key_paths: AttrPath
) -> Resource:
    """A GCE or Azure managed disk: always encrypted; customer key if one is referenced."""
    unknown: set[str] = set()
    customer_key = mark_key(any_key_set(disk, *key_paths), unknown)
    return new_volume(
        change, parent, block_path, disk, encrypted=True, customer_key=customer_key, unknown=unknown
    )
