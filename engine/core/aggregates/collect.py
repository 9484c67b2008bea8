"""Aggregation during one evaluation: collect each aggregate policy's members, then turn them
into groups for the engine to judge."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

from engine.core.aggregates.registry import (
    AGGREGATORS,
    AggregateInputs,
    GroupPolicy,
    Member,
    PlanChange,
)
from engine.core.checks.has_gpu import GpuState, scope_at
from engine.core.conditions import Condition, EvalContext
from engine.core.labels import exempt_policies
from engine.core.model import Category, CostDiff, Door, Resource

P = TypeVar("P", bound=GroupPolicy)


@dataclass(frozen=True, slots=True)
class _Offer(Generic[P]):
    """An aggregate policy as `offer` applies it to resources of one category, door and GPU
    state (`engine.core.evaluate`'s steps, for groups)."""

    policy: P
    scope: Condition | None  # less what the GPU state answers
    out_of_scope: bool  # kept only to count an exemption


class Aggregation(Generic[P]):
    """Collects the members of the aggregate policies during one evaluation, then yields their
    groups for the engine to judge."""

    def __init__(self, policies: Sequence[P], ctx: EvalContext,
                 cost_changes: Sequence[PlanChange] | None = None):
        self.policies = list(policies)
        self.ctx = ctx
        self.cost_changes = cost_changes
        self.exempted = 0
        self.cost_diff: CostDiff | None = None
        self._by_category: dict[Category, list[P]] = {c: [] for c in Category}
        for policy in self.policies:
            for category in policy.categories:
                self._by_category[category].append(policy)
        self._members: dict[tuple[str, Door], list[Member]] = {}
        self._offers: dict[tuple[Category, Door, GpuState, bool], tuple[_Offer[P], ...]] = {}

    def offer(self, resource: Resource, door: Door, exempt_ids: frozenset[str],
              gpus: GpuState) -> None:
        """Called by the engine for every resource evaluated, with what `has-gpu` answers."""
        for step in self._offers_for(resource.category, door, gpus, bool(exempt_ids)):
            policy = step.policy
            if (exempt_ids or policy.exempt) and exempt(policy, resource, exempt_ids):
                self.exempted += 1
                continue
            if step.out_of_scope:
                continue
            scope = True if step.scope is None else step.scope.test(resource, self.ctx)
            if scope is not False:
                members = self._members.get((policy.id, door))
                if members is None:
                    members = self._members[policy.id, door] = []
                members.append(Member(resource, scope is True))

    def _offers_for(self, category: Category, door: Door, gpus: GpuState,
                    exempt_by_tags: bool) -> tuple[_Offer[P], ...]:
        """The policies on at the door for that category, less those out of scope for the GPU
        state unless an exemption of them must still be counted."""
        key = (category, door, gpus, exempt_by_tags)
        offers = self._offers.get(key)
        if offers is None:
            made = (_Offer(policy, *scope_at(policy.scope, gpus))
                    for policy in self._by_category[category] if policy.doors[door] != "off")
            offers = self._offers[key] = tuple(
                step for step in made
                if not step.out_of_scope or exempt_by_tags or step.policy.exempt)
        return offers

    def selects(self, policy: P, resource: Resource) -> bool:
        """Whether the policy would take `resource` as a member (unknown scope included)."""
        if resource.category not in policy.categories:
            return False
        if exempt(policy, resource, exempt_policies(resource)):
            return False
        return policy.scope is None or policy.scope.test(resource, self.ctx) is not False

    def groups(self, forced_door: Door | None) -> Iterator[tuple[P, Resource, Door]]:
        """Each aggregate policy's non-exempt groups, door by door."""
        for policy in self.policies:
            for door in self._doors(policy, forced_door):
                members = self._members.get((policy.id, door), [])
                inputs = AggregateInputs(
                    ctx=self.ctx, door=door,
                    selects=partial(self.selects, policy),
                    cost_changes=self.cost_changes if door == "plan" else None,
                )
                outcome = AGGREGATORS[policy.spec.aggregate or ""](policy, members, inputs)
                if outcome.cost_diff is not None and self.cost_diff is None:
                    self.cost_diff = outcome.cost_diff
                for group in outcome.groups:
                    if exempt(policy, group, exempt_policies(group)):
                        self.exempted += 1
                    else:
                        yield policy, group, door

    def _doors(self, policy: P, forced_door: Door | None) -> list[Door]:
        doors = {door for (policy_id, door) in self._members if policy_id == policy.id}
        if self.cost_changes is not None and (forced_door in (None, "plan")):
            doors.add("plan")  # a plan that only deletes still has a cost diff
        return sorted(d for d in doors if policy.doors[d] != "off")


def exempt(policy: GroupPolicy, resource: Resource, exempt_ids: frozenset[str]) -> bool:
    """Exempt from the policy by an exemption tag/label or by one of the policy's id globs."""
    if exempt_ids and (policy.id in exempt_ids or "all" in exempt_ids):
        return True
    return any(pattern.match(resource.id) for pattern in policy.exempt)
