"""`has-gpu`: the resource holds GPUs (whole or MIG slices)."""

from __future__ import annotations

from typing import Any

from engine.core.checks.args import FlagArgs
from engine.core.conditions import Check, EvalContext, register_check
from engine.core.enrich import catalog_miss, claim_miss
from engine.core.model import Resource
from engine.core.tristate import Tri


def _gpus_unknown(resource: Resource) -> bool:
    """A type known only after apply, or an unreadable GPU request (no GPUs read)."""
    return bool(resource.unknown) and resource.is_unknown("gpu") and not resource.has_gpu


@register_check
class HasGpu(Check):
    key = "has-gpu"
    description = "The resource holds GPUs (whole or MIG slices); unknown when its type is unknown."
    Args = FlagArgs
    shorthand = "expected"

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if _gpus_unknown(resource):
            return None
        return resource.has_gpu is bool(self.args.expected)

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if not _gpus_unknown(resource):
            return {}
        # a type the catalog does not list, a DRA claim not found: say which
        why = catalog_miss(resource) or claim_miss(resource)
        return {"unknown": ["gpu"], "unknown_reason": why} if why else {"unknown": ["gpu"]}
