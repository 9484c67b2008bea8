"""`has-gpu`: the resource holds GPUs (whole or MIG slices)."""

from __future__ import annotations

from typing import Any, Literal

from engine.core.check_args import FlagArgs
from engine.core.conditions import AllCondition, Check, Condition, EvalContext, register_check
from engine.core.enrich import catalog_miss, claim_miss
from engine.core.model import Resource
from engine.core.tristate import Tri


def gpus_unknown(resource: Resource) -> bool:
    """A type known only after apply, or an unreadable GPU request (no GPUs read)."""
    return bool(resource.unknown) and resource.is_unknown("gpu") and not resource.has_gpu


class HasGpu(Check):
    key = "has-gpu"
    description = "The resource holds GPUs (whole or MIG slices); unknown when its type is unknown."
    Args = FlagArgs
    shorthand = "expected"
    evidence_only_when_unknown = True

    def test(self, resource: Resource, ctx: EvalContext) -> Tri:
        if gpus_unknown(resource):
            return None
        return resource.has_gpu is bool(self.args.expected)

    def evidence(self, resource: Resource, ctx: EvalContext) -> dict[str, Any]:
        if not gpus_unknown(resource):
            return {}
        # a type the catalog does not list, a DRA claim not found: say which
        why = catalog_miss(resource) or claim_miss(resource)
        return {"unknown": ["gpu"], "unknown_reason": why} if why else {"unknown": ["gpu"]}


def _holds_gpus(condition: Condition) -> bool:
    return type(condition) is HasGpu and condition.args.expected is True


def requires_gpus(scope: Condition | None) -> bool:
    """Whether the scope holds only for resources with GPUs: it is `has-gpu: true`, or an
    `all:` with that among its items (then a resource without GPUs is out of scope)."""
    if scope is None:
        return False
    if _holds_gpus(scope):
        return True
    return type(scope) is AllCondition and any(_holds_gpus(item) for item in scope.items)


def without_gpu_test(scope: Condition | None) -> Condition | None:
    """The scope as it tests a resource that holds GPUs: its `has-gpu: true` items hold, so
    they are left out (None when nothing is left, the item itself when one is left). Other
    scopes are returned as they are."""
    if scope is None or _holds_gpus(scope):
        return None
    if type(scope) is not AllCondition or not any(_holds_gpus(i) for i in scope.items):
        return scope
    rest = [item for item in scope.items if not _holds_gpus(item)]
    if len(rest) > 1:
        return AllCondition(rest)
    return rest[0] if rest else None


GpuState = Literal["gpus", "none", "unknown"]


def gpu_state(resource: Resource) -> GpuState:
    """What `has-gpu` answers for the resource: holds GPUs, holds none, or not known yet."""
    if resource.has_gpu:
        return "gpus"
    return "unknown" if gpus_unknown(resource) else "none"


def scope_at(scope: Condition | None, gpus: GpuState) -> tuple[Condition | None, bool]:
    """The scope as it tests resources in that GPU state, and whether they are out of it: with
    GPUs its `has-gpu: true` items hold and are left out; without, a scope that requires GPUs
    never holds. The loops work it out once per category and state, not per resource."""
    if gpus == "gpus":
        return without_gpu_test(scope), False
    if gpus == "none":
        return scope, requires_gpus(scope)
    return scope, False


register_check(HasGpu)
