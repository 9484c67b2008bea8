"""The `team-budget` aggregate: team GPU run-rates against their budgets.

- **Runtime**: one `team/<name>` group per team with running GPU resources and a budget; the
  `over-budget` check fails it when the projected run-rate exceeds the budget.
- **PR check**: from the plan's changes before and after, each team's previous and planned
  run-rate and what the change adds and removes (`engine.core.aggregates.team_cost_diff`); the
  report's `cost_diff` lists them, and the check fails a team when the change raises its
  planned run-rate above its budget. The plan only shows the spend its configuration manages.

Budgets, a resource's team and run-rates are `engine.core.budget`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.core.aggregates.registry import (
    AggregateInputs,
    AggregateOutcome,
    GroupPolicy,
    Member,
    aggregator,
)
from engine.core.aggregates.team_cost_diff import plan_outcome
from engine.core.aggregates.teams import TOP_RESOURCES, TeamSettings, policy_budgets, team_resource
from engine.core.budget import team_of
from engine.core.model import GroupSpend, MemberSpend, Resource


@dataclass
class _TeamSpend:
    monthly: float = 0.0
    unpriced: int = 0
    resources: list[tuple[float, Resource]] = field(default_factory=list)

    def add(self, resource: Resource, monthly: float | None) -> None:
        if monthly is None:
            self.unpriced += 1
        else:
            self.monthly += monthly
            self.resources.append((monthly, resource))

    def facts(self) -> GroupSpend:
        monthly = round(self.monthly, 2)
        return GroupSpend(monthly_usd=monthly, net_usd=monthly, unpriced=self.unpriced,
                          top_resources=self._top())

    def _top(self) -> list[MemberSpend]:
        ranked = sorted(self.resources, key=lambda item: (-item[0], item[1].id))
        return [MemberSpend(id=r.id, name=r.name, monthly_usd=round(usd, 2))
                for usd, r in ranked[:TOP_RESOURCES]]


@aggregator("team-budget")
def by_team(policy: GroupPolicy, members: Sequence[Member],
            inputs: AggregateInputs) -> AggregateOutcome:
    """Runtime: one group per team that has a budget. PR check: the cost diff of every team,
    and a group per budgeted team the plan changes. Planned resources without their plan's
    changes (a Terraform plan inside a snapshot) are not judged: what a change adds and removes
    needs both sides of it, which `check-plan` reads."""
    settings = TeamSettings.of(policy, inputs.ctx.catalog)
    budgets = policy_budgets(policy)
    if inputs.door == "plan":
        if inputs.cost_changes is None:
            return AggregateOutcome()
        return plan_outcome(settings, inputs, budgets)
    spend: dict[str, _TeamSpend] = {}
    for member in members:
        team = team_of(member.resource, settings.team_tag)
        if team is None or budgets.of(team) is None:
            continue
        monthly = settings.rate(member.resource) if member.certain else None
        spend.setdefault(team, _TeamSpend()).add(member.resource, monthly)
    groups = [team_resource(team, settings.team_tag, inputs.door, found.facts())
              for team, found in sorted(spend.items())]
    return AggregateOutcome(groups=groups)
