"""The plan's cost diff: every change of a mapped type with its resources before and after.

Deletes and the `before` side of updates are read by the same normalizers as what is planned,
without adding them to what policies evaluate. `plan_inputs` gives both what policies evaluate
and the cost diff from one normalization of the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.model import CostChange, Resource
from engine.sources.terraform.document import check_plan_document
from engine.sources.terraform.normalized import NormalizedPlan
from engine.sources.terraform.reading import read_plan

# Kinds whose object before the change is the cost diff's `before` side.
_BEFORE_KINDS = frozenset({"update", "replace", "delete", "no-op"})

# The cost diff's input is the core's `CostChange`; the `before` side is read from
# `change.before` by the same normalizers, so deletes and the old side of updates are priced
# like anything planned. The old name stays for its importers.
PlanCostChange = CostChange


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What plans give the PR check: the resources policies evaluate, the cost diff, and the
    plan documents when asked for (for policies that read whole plans)."""

    resources: list[Resource]
    cost_changes: list[CostChange]
    documents: list[dict[str, Any]] = field(default_factory=list)


def read_plan_inputs(paths: Sequence[str], catalog: Catalog, *,
                     keep_documents: bool) -> PlanInputs:
    """The `plan_inputs` of the plan files at `paths`, read one at a time. Unless
    `keep_documents`, each plan is read without the parts the normalizers do not read and
    dropped once normalized: the documents are the bulk of the memory a big plan takes."""
    resources: list[Resource] = []
    cost_changes: list[CostChange] = []
    documents: list[dict[str, Any]] = []
    for path in paths:
        document = read_plan(path, whole=keep_documents)
        inputs = plan_inputs(document, path, catalog)
        resources.extend(inputs.resources)
        cost_changes.extend(inputs.cost_changes)
        if keep_documents:
            documents.append(document)
    return PlanInputs(resources, cost_changes, documents)


def plan_inputs(plan: dict[str, Any], source: str, catalog: Catalog | None = None) -> PlanInputs:
    """`plan_resources` and `plan_cost_changes` of `plan` from one normalization."""
    check_plan_document(plan, source)
    with NormalizedPlan(plan, source, catalog or builtin_catalog()) as normalized:
        return PlanInputs(normalized.evaluated_resources(), _cost_changes(plan, normalized))


def plan_cost_changes(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[CostChange]:
    """Every managed change of a mapped type (no-ops included, for totals) with its resources
    before and after. Resources keep `State.PLANNED` on both sides."""
    check_plan_document(plan, source)
    with NormalizedPlan(plan, source, catalog or builtin_catalog()) as normalized:
        return _cost_changes(plan, normalized)


def _cost_changes(plan: dict[str, Any], normalized: NormalizedPlan) -> list[CostChange]:
    before = _before_side(plan, normalized)
    return [
        CostChange.model_validate({
            "address": address, "action": kind, "before": before.get(address, ()),
            "after": tuple(normalized.resources_at(address)) if address in normalized.after
            else ()})
        for address, kind in normalized.kinds.items()
    ]


def _before_side(plan: dict[str, Any], normalized: NormalizedPlan) -> dict[str, tuple[Resource,
                                                                                        ...]]:
    """The resources each change's `before` object normalizes to, read in a plan of its own
    (joins find the other objects as they were), by address."""
    with NormalizedPlan(_before_plan(plan), normalized.source, normalized.index.catalog,
                        check=False) as before:
        return {address: tuple(before.resources_at(address)) for address in before.kinds
                if normalized.kinds.get(address) in _BEFORE_KINDS}


def _before_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as if every `before` object were planned: what existed, to normalize it."""
    changes = []
    for change in plan.get("resource_changes") or []:
        body = change["change"]
        before = body.get("before")
        if not isinstance(before, dict):
            continue
        changes.append({**change, "change": {
            "actions": ["create"], "before": None, "after": before, "after_unknown": {},
            "after_sensitive": body.get("before_sensitive") or {},
        }})
    return {**plan, "resource_changes": changes}
