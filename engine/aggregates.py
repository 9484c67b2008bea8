"""Aggregate policies: judged per group of resources (a team, a namespace), not per resource.

A policy with `aggregate: NAME` is evaluated in two steps. During the engine's per-resource pass
its `scope` picks the **members** (resources of its categories, at a door where it is not `off`,
not exempt). Afterwards the registered aggregator turns each door's members into **group
resources**, synthetic `Resource`s such as `team/research` or `Namespace/ml` whose facts sum up
their members, and the policy's `violation` is tested on each group. A group is exempt by the
policy's `exempt:` globs on its id, or by an exemption tag/label it carries (a namespace's labels).

Aggregators are registered classes' functions (`@aggregator("team-budget")`), like checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from engine.conditions import EvalContext
from engine.labels import exempt_policies
from engine.model import Category, CostDiff, Door, Resource, State, WorkloadSpec

if TYPE_CHECKING:
    from engine.policy import CompiledPolicy
    from engine.sources.terraform import PlanCostChange


@dataclass(frozen=True, slots=True)
class Member:
    """A resource an aggregate policy's scope selected; `certain` is False when the scope's
    verdict was unknown (a planned instance whose type, hence GPUs, is not known yet)."""

    resource: Resource
    certain: bool = True


@dataclass(frozen=True, slots=True)
class AggregateInputs:
    """What an aggregator may read besides its members."""

    ctx: EvalContext
    door: Door
    selects: Callable[[Resource], bool]  # the policy's scope and exemptions, for other resources
    cost_changes: Sequence[PlanCostChange] | None = None  # the plan's changes (check-plan only)


@dataclass
class AggregateOutcome:
    groups: list[Resource] = field(default_factory=list)
    cost_diff: CostDiff | None = None


Aggregator = Callable[["CompiledPolicy", Sequence[Member], AggregateInputs], AggregateOutcome]
AGGREGATORS: dict[str, Aggregator] = {}


def aggregator(name: str) -> Callable[[Aggregator], Aggregator]:
    def register(function: Aggregator) -> Aggregator:
        AGGREGATORS[name] = function
        return function

    return register


class Aggregation:
    """Collects the members of the aggregate policies during one evaluation, then yields their
    groups for the engine to judge."""

    def __init__(self, policies: Sequence[CompiledPolicy], ctx: EvalContext,
                 cost_changes: Sequence[PlanCostChange] | None = None):
        self.policies = list(policies)
        self.ctx = ctx
        self.cost_changes = cost_changes
        self.exempted = 0
        self.cost_diff: CostDiff | None = None
        self._by_category: dict[Category, list[CompiledPolicy]] = {c: [] for c in Category}
        for policy in self.policies:
            for category in policy.categories:
                self._by_category[category].append(policy)
        self._members: dict[tuple[str, Door], list[Member]] = {}

    def offer(self, resource: Resource, door: Door, exempt_ids: frozenset[str]) -> None:
        """Called by the engine for every resource evaluated."""
        for policy in self._by_category[resource.category]:
            if policy.doors[door] == "off":
                continue
            if _exempt(policy, resource, exempt_ids):
                self.exempted += 1
                continue
            scope = True if policy.scope is None else policy.scope.test(resource, self.ctx)
            if scope is not False:
                self._members.setdefault((policy.id, door), []).append(
                    Member(resource, certain=scope is True))

    def selects(self, policy: CompiledPolicy, resource: Resource) -> bool:
        """Whether the policy would take `resource` as a member (unknown scope included)."""
        if resource.category not in policy.categories:
            return False
        if _exempt(policy, resource, exempt_policies(resource)):
            return False
        return policy.scope is None or policy.scope.test(resource, self.ctx) is not False

    def groups(self, forced_door: Door | None) -> Iterator[tuple[CompiledPolicy, Resource, Door]]:
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
                    if _exempt(policy, group, exempt_policies(group)):
                        self.exempted += 1
                    else:
                        yield policy, group, door

    def _doors(self, policy: CompiledPolicy, forced_door: Door | None) -> list[Door]:
        doors = {door for (policy_id, door) in self._members if policy_id == policy.id}
        if self.cost_changes is not None and (forced_door in (None, "plan")):
            doors.add("plan")  # a plan that only deletes still has a cost diff
        return sorted(d for d in doors if policy.doors[d] != "off")


def _exempt(policy: CompiledPolicy, resource: Resource, exempt_ids: frozenset[str]) -> bool:
    if exempt_ids and (policy.id in exempt_ids or "all" in exempt_ids):
        return True
    return any(pattern.match(resource.id) for pattern in policy.exempt)


# ---------------------------------------------------------------------------- namespaces


@aggregator("namespace")
def by_namespace(policy: CompiledPolicy, members: Sequence[Member],
                 inputs: AggregateInputs) -> AggregateOutcome:
    """One `Namespace/<name>` group per namespace with members, carrying the namespace's facts
    (labels, NetworkPolicy count) and the ids of its member workloads in `raw.workloads`."""
    by_key: dict[tuple[str | None, str], list[Resource]] = {}
    for member in members:
        if member.certain and member.resource.namespace:
            key = (member.resource.cluster, member.resource.namespace)
            by_key.setdefault(key, []).append(member.resource)
    groups = [_namespace_group(cluster, namespace, resources)
              for (cluster, namespace), resources in sorted(by_key.items(),
                                                           key=lambda item: str(item[0]))]
    return AggregateOutcome(groups=groups)


def _namespace_group(cluster: str | None, namespace: str,
                     resources: list[Resource]) -> Resource:
    first = resources[0]
    counts = {r.workload.namespace_network_policies for r in resources if r.workload}
    known = {count for count in counts if count is not None}
    count = known.pop() if len(known) == 1 and None not in counts else None
    return Resource(
        provider=first.provider,
        kind="Namespace",
        category=Category.OTHER,
        id=f"Namespace/{namespace}",
        name=namespace,
        cluster=cluster,
        namespace=namespace,
        tags=dict(first.namespace_labels),
        namespace_labels=dict(first.namespace_labels),
        state=State.RUNNING if any(r.state is State.RUNNING for r in resources) else first.state,
        workload=WorkloadSpec(namespace_network_policies=count),
        unknown=frozenset() if count is not None else frozenset(
            {"workload.namespace_network_policies"}),
        raw={"workloads": sorted(r.id for r in resources)},
    )


# Registered elsewhere, imported here so that every aggregator exists once this module does.
from engine import budget as _budget  # noqa: E402, F401
