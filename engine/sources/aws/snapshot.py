"""The snapshot door: a saved scan's `aws:` section normalized again, offline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.core.errors import InputError
from engine.core.model import Resource
from engine.sources.aws.failures import one_line
from engine.sources.aws.inventory import region_resources

if TYPE_CHECKING:
    from engine.sources.snapshot import SnapshotContext


def read_snapshot_section(value: Any, ctx: SnapshotContext) -> list[Resource]:
    """The `aws:` section of a snapshot: a list of scanned (account, region) natives."""
    if not isinstance(value, list):
        raise InputError("aws must be a list of scanned regions ({account, region, ...})",
                         file=ctx.file)
    found: list[Resource] = []
    for position, scan in enumerate(value):
        if not isinstance(scan, Mapping) or not isinstance(scan.get("region"), str):
            raise InputError(f"aws[{position}] needs a 'region'", file=ctx.file)
        try:
            found.extend(region_resources(scan, ctx.catalog))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) \
                else one_line(exc)
            raise InputError(f"aws[{position}] ({scan['region']}): unreadable object: "
                             f"{type(exc).__name__} {problem}", file=ctx.file) from None
    return found
