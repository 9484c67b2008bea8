"""What policies evaluate: the normalized resources of a plan's creates, updates and replaces."""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog, builtin_catalog
from engine.core.model import Resource
from engine.sources.terraform.document import check_plan_document
from engine.sources.terraform.normalized import NormalizedPlan


def plan_resources(
    plan: dict[str, Any], source: str, catalog: Catalog | None = None
) -> list[Resource]:
    """Normalized resources for the creates, updates and replaces of `plan`.

    `source` names the plan in errors. Only types in `SUPPORTED_TYPES` are returned. Raises
    `InputError` naming the file and change when the plan's structure is broken.
    """
    check_plan_document(plan, source)
    with NormalizedPlan(plan, source, catalog or builtin_catalog()) as normalized:
        return normalized.evaluated_resources()
