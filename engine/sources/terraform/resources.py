"""What policies evaluate: the normalized resources of a plan's creates, updates and replaces."""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.model import Resource
from engine.sources.terraform.document import EVALUATED_ACTIONS, check_change, check_plan_document
from engine.sources.terraform.plan_index import PlanIndex
from engine.sources.terraform.registry import enriched, is_supported, normalize


def plan_resources(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[Resource]:
    """Normalized resources for the creates, updates and replaces of `plan`.

    `source` names the plan in errors. Only types in `SUPPORTED_TYPES` are returned. Raises
    `InputError` naming the file and change when the plan's structure is broken.
    """
    check_plan_document(plan, source)
    index = PlanIndex(plan, catalog or builtin_catalog())
    evaluated: dict[str, None] = {}  # addresses in plan order, each once
    for position, change in enumerate(plan.get("resource_changes") or []):
        check_change(change, position, source)
        index.add(change)
        if _is_evaluated(change):
            evaluated[change["address"]] = None
    resources: list[Resource] = []
    for address in evaluated:
        planned = index.planned(address)
        if planned is not None:
            resources.extend(enriched(r, index.catalog) for r in normalize(planned, source))
    return resources


def _is_evaluated(change: dict[str, Any]) -> bool:
    type_ = change.get("type")
    return (
        change.get("mode", "managed") == "managed"
        and isinstance(type_, str)
        and is_supported(type_)
        and tuple(change["change"]["actions"]) in EVALUATED_ACTIONS
    )
