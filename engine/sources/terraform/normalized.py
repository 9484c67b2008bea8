"""One normalization of a plan's changes, shared by what policies evaluate and the cost diff.

`normalize_plan` checks and indexes every change once and normalizes a planned object at most
once, the first time either reader asks for its address: the resources policies evaluate are
the very objects the cost diff prices on its `after` side.
"""

from __future__ import annotations

from typing import Any

from engine.core.catalog import Catalog
from engine.core.model import Resource
from engine.sources.terraform.document import check_change
from engine.sources.terraform.plan_index import PlanIndex
from engine.sources.terraform.registry import enriched, is_supported, normalize

# What each change means for the cost diff, by its actions; other actions (read, forget) count
# for neither the diff nor the policies.
CHANGE_KINDS: dict[tuple[str, ...], str] = {
    ("create",): "create",
    ("update",): "update",
    ("delete", "create"): "replace",
    ("create", "delete"): "replace",
    ("delete",): "delete",
    ("no-op",): "no-op",
}
# Kinds whose planned object policies evaluate (`document.EVALUATED_ACTIONS`), and those whose
# planned object is the cost diff's `after` side (no-ops too, for totals).
EVALUATED_KINDS = frozenset({"create", "update", "replace"})
AFTER_KINDS = frozenset({"create", "update", "replace", "no-op"})


class NormalizedPlan:
    """A plan's changes checked and indexed, with each address normalized at most once; a
    context manager that releases what it built on leaving.

    `evaluated`: the addresses policies evaluate, in plan order. `after`: the addresses whose
    planned object is the cost diff's `after` side. `kinds`: the cost-diff kind of each mapped
    managed change (the first change at an address decides).
    """

    def __init__(self, plan: dict[str, Any], source: str, catalog: Catalog, *,
                 check: bool = True) -> None:
        self.index = PlanIndex(plan, catalog)
        self.source = source
        self.evaluated: dict[str, None] = {}
        self.after: dict[str, None] = {}
        self.kinds: dict[str, str] = {}
        self._resources: dict[str, list[Resource]] = {}
        for position, change in enumerate(plan.get("resource_changes") or []):
            if check:
                check_change(change, position, source)
            self.index.add(change)
            self._classify(change)

    def __enter__(self) -> NormalizedPlan:
        return self

    def __exit__(self, *_: object) -> None:
        self.index.release()
        self._resources.clear()

    def _classify(self, change: dict[str, Any]) -> None:
        if change.get("mode", "managed") != "managed" or not is_supported(change.get("type")):
            return
        kind = CHANGE_KINDS.get(tuple(change["change"]["actions"]))
        if kind is None:
            return
        address = change["address"]
        self.kinds.setdefault(address, kind)
        if kind in EVALUATED_KINDS:
            self.evaluated[address] = None
        if kind in AFTER_KINDS and isinstance(change["change"].get("after"), dict):
            self.after[address] = None

    def resources_at(self, address: str) -> list[Resource]:
        """The enriched resources of the change planned at `address` (empty when none)."""
        found = self._resources.get(address)
        if found is None:
            planned = self.index.planned(address)
            found = [] if planned is None else [
                enriched(resource, self.index.catalog)
                for resource in normalize(planned, self.source)
            ]
            self._resources[address] = found
        return found

    def evaluated_resources(self) -> list[Resource]:
        """What policies evaluate: the resources of every evaluated address, in plan order."""
        return [resource for address in self.evaluated for resource in self.resources_at(address)]
