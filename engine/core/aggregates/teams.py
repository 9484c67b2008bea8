"""What the team budget's runtime groups and plan cost diff share: the policy's settings, the
budgets its `over-budget` check compiled, and the synthetic `team/<name>` resource."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.aggregates.registry import GroupPolicy
from engine.core.budget import Budgets, run_rate
from engine.core.catalog import Catalog
from engine.core.checks.over_budget import OverBudget
from engine.core.conditions import walk
from engine.core.model import Category, Door, GroupFacts, GroupSpend, Resource, State

PROVIDER = "gpuwarden"
KIND = "Team"
TOP_RESOURCES = 5


@dataclass
class TeamSettings:
    team_tag: str
    schedule_tag: str
    default_schedule: str | None
    catalog: Catalog

    @classmethod
    def of(cls, policy: GroupPolicy, catalog: Catalog) -> TeamSettings:
        params = policy.spec.parameters
        default = params.get("default_schedule")
        return cls(str(params.get("team_tag") or "team"),
                   str(params.get("schedule_tag") or "gpuwarden-offhours"),
                   str(default) if default else None, catalog)

    def rate(self, resource: Resource) -> float | None:
        """The resource's projected monthly run-rate; None when it has no price."""
        return run_rate(resource, self.catalog, schedule_tag=self.schedule_tag,
                        default_schedule=self.default_schedule).monthly_usd


def policy_budgets(policy: GroupPolicy) -> Budgets:
    """The budgets the policy's `over-budget` check compiled (none without one)."""
    for node in walk(policy.violation):
        if isinstance(node, OverBudget):
            return node.budgets
    return Budgets()


def team_resource(team: str, team_tag: str, door: Door, spend: GroupSpend) -> Resource:
    """The synthetic `team/<name>` resource a team budget finding is about."""
    return Resource(
        provider=PROVIDER,
        kind=KIND,
        category=Category.OTHER,
        id=f"team/{team}",
        name=team,
        tags={team_tag: team},
        state=State.PLANNED if door == "plan" else State.RUNNING,
        group=GroupFacts(door=door, spend=spend),
    )
