"""Field readers every cloud's normalizers share: instance types, counts, spot capacity, keys,
provider defaults. Each marks what it cannot know in the `unknown` set it is given."""

from __future__ import annotations

from typing import Any

from engine.core.model import Capacity
from engine.sources.terraform.attributes import AttrPath, Attrs, tag_text
from engine.sources.terraform.plan_index import PlannedChange

# The normalized paths a reader marks unknown together.
TYPE_UNKNOWN = frozenset({"instance_type", "gpu", "hourly_usd"})
GPU_UNKNOWN = frozenset({"gpu", "hourly_usd"})
ENCRYPTION_UNKNOWN = frozenset({"encrypted", "customer_key"})


def read_instance_type(attrs: Attrs, unknown: set[str], *path: str | int) -> str | None:
    if attrs.hidden(*path):
        unknown.update(TYPE_UNKNOWN)
        return None
    value = attrs.text(*path)
    return value.rsplit("/", 1)[-1] if value else None  # GCP may hold a machineTypes/ URL


def read_count(attrs: Attrs, unknown: set[str], *paths: AttrPath, default: int = 1) -> int:
    """The first known count among `paths` (later ones are fallbacks, e.g. min size).

    `count` is marked unknown when a configured count is not known yet.
    """
    if attrs.hidden(*paths[0]) and not attrs.left_to_provider(*paths[0]):
        unknown.add("count")
    for path in paths:
        value = attrs.number(*path)
        if value is not None:
            return value
    return default


def spot_capacity(spot: bool | None, unknown: set[str]) -> Capacity:
    if spot is None:
        unknown.add("capacity")
        return Capacity.UNKNOWN
    return Capacity.SPOT if spot else Capacity.ON_DEMAND


def flag_or_default(attrs: Attrs, key: str, default: bool) -> bool | None:
    """A boolean argument; its provider default when left unset; None when not known yet."""
    if attrs.hidden(key):
        return default if attrs.left_to_provider(key) else None
    found = attrs.flag(key)
    return default if found is None else found


def any_key_set(attrs: Attrs, *paths: AttrPath) -> bool | None:
    """Whether any of the key references at `paths` is set (None when that is not known)."""
    states = [attrs.is_set(*path) for path in paths]
    if any(states):
        return True
    return None if None in states else False


def mark_key(customer_key: bool | None, unknown: set[str]) -> bool | None:
    if customer_key is None:
        unknown.add("customer_key")
    return customer_key


def merge_defaults(defaults: Any, own: dict[str, str], unknown: set[str]) -> dict[str, str]:
    """Provider-level default tags/labels under the resource's own ones."""
    if isinstance(defaults, dict):
        return {**{k: tag_text(v) for k, v in defaults.items() if v is not None}, **own}
    if defaults is not None:  # not a constant, or no configuration to tell
        unknown.add("tags")
    return own


def provider_region(change: PlannedChange, provider: str) -> str | None:
    value = change.plan.provider_setting(change, provider, "region")
    return value if isinstance(value, str) else None
