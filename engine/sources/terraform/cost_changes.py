"""The plan's cost diff: every change of a mapped type with its resources before and after.

Deletes and the `before` side of updates are read by the same normalizers as what is planned,
without adding them to what policies evaluate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.model import CostChange, Resource
from engine.sources.terraform.document import check_change, check_plan_document
from engine.sources.terraform.plan_index import PlanIndex
from engine.sources.terraform.registry import enriched, is_supported, normalize

_CHANGE_KINDS: dict[tuple[str, ...], str] = {
    ("create",): "create",
    ("update",): "update",
    ("delete", "create"): "replace",
    ("create", "delete"): "replace",
    ("delete",): "delete",
    ("no-op",): "no-op",
}


# The cost diff's input is the core's `CostChange`; the `before` side is read from
# `change.before` by the same normalizers, so deletes and the old side of updates are priced
# like anything planned. The old name stays for its importers.
PlanCostChange = CostChange


def plan_cost_changes(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[CostChange]:
    """Every managed change of a mapped type (no-ops included, for totals) with its resources
    before and after. Resources keep `State.PLANNED` on both sides."""
    check_plan_document(plan, source)
    catalog = catalog or builtin_catalog()
    actions: dict[str, str] = {}
    for position, change in enumerate(plan.get("resource_changes") or []):
        check_change(change, position, source)
        kind = _CHANGE_KINDS.get(tuple(change["change"]["actions"]))
        if kind is not None and change.get("mode", "managed") == "managed" \
                and is_supported(change.get("type")):
            actions.setdefault(change["address"], kind)
    after = _normalized_by_address(plan, source, catalog, {"create", "update", "replace",
                                                            "no-op"})
    before = _normalized_by_address(_before_plan(plan), source, catalog,
                                    {"update", "replace", "delete", "no-op"}, actions)
    return [
        CostChange.model_validate({"address": address, "action": kind,
                                   "before": tuple(before.get(address, ())),
                                   "after": tuple(after.get(address, ()))})
        for address, kind in actions.items()
    ]


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


def _normalized_by_address(
    plan: dict[str, Any],
    source: str,
    catalog: Catalog,
    kinds: set[str],
    actions: Mapping[str, str] | None = None,
) -> dict[str, list[Resource]]:
    """Normalized resources of the changes whose kind is in `kinds`, by change address.
    `actions` gives each address's kind when the plan's own actions were rewritten."""
    index = PlanIndex(plan, catalog)
    wanted: list[str] = []
    for change in plan.get("resource_changes") or []:
        index.add(change)
        address = change["address"]
        kind = (actions or {}).get(address) if actions is not None \
            else _CHANGE_KINDS.get(tuple(change["change"]["actions"]))
        if kind in kinds and is_supported(change.get("type")) \
                and change.get("mode", "managed") == "managed" \
                and isinstance(change["change"].get("after"), dict):
            wanted.append(address)
    found: dict[str, list[Resource]] = {}
    for address in wanted:
        planned = index.planned(address)
        if planned is not None:
            found[address] = [enriched(r, catalog) for r in normalize(planned, source)]
    return found
